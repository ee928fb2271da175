"""``qpid-ha-agent --designated-primary``: run the survivor of a two-broker cluster as
primary without a quorum (seed 004's ``designatedPrimary``), the operator's override.

:Status: Beta

Without a ZooKeeper quorum (an ensemble of 3 with 2 servers down, the one server of a
two-node site gone with its node) no agent can promote anything: promotion needs the
election, the epoch counter and the in-sync set, all in ZooKeeper. A primary whose agent
loses ZooKeeper fences itself (its lease runs out), so the cluster stops serving. Seed 004
leaves the way out to "a third party (an operator, a script or a combination of the two)
[that] verifies that the master has truly failed". This is that way out: the operator starts
the survivor's agent with ``--designated-primary --peer OTHER`` instead of the usual agent.

What it does (:class:`DesignatedPrimary`), ZooKeeper never written:

1. It starts and supervises the broker (``--broker-command``) or uses the running one, and
   waits for it to answer.
2. It checks the other broker directly (:func:`refusal`, pure): its management API
   (``--peer``, ``/api/status``) and, over AMQP, every address the local broker knows
   (``/api/ha`` ``primary`` and ``members``; the ``qpid.ha-status`` of the peer's
   ``connection.start``). A peer that answers as primary (active, recovering) refuses the
   designation, as does a broker in catch-up (it certainly lacks confirmed messages) and a
   ZooKeeper that answers (a quorum: the agents decide, no override is needed).
3. It promotes its broker with an epoch above every epoch it saw (its own, the peers'),
   with an empty in-sync set, without a lease (nobody renews it), and logs
   ``designated_primary`` at level critical, saying what may be lost (below).
4. Then, every check interval, it commits the broker's in-sync set itself (a backup that
   went away is removed at once, its held confirms released: with the set out of ZooKeeper
   the designated agent is the only cluster manager) and, if the broker restarted, checks
   the peers again before promoting it again.

What the override risks (``docs/agent.md``, "Designated primary"): every message the
other broker confirmed after this broker left the committed in-sync set (fell behind, was
stopped or cut off, and its removal was committed): those are on the other broker's store
only. If this broker was in the set when the other stopped, nothing is lost. And a peer
that still serves but cannot be reached from here (a partition where the other side kept
ZooKeeper) makes two primaries: what either confirms may be lost when they meet.

Error Handling
==============

- A refusal is logged (``designated_primary_refused``) and ends the agent with exit 1 and
  one line (:attr:`DesignatedPrimary.refusal`); a supervised broker is stopped with it.
- A broker that does not answer is waited for; a promotion the broker refuses (409) is a
  refusal; any other management error is tried again at the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from kazoo.client import KazooClient

from broker.management.client import ManagementError
from broker.management.status_check import check_status
from common.log import set_log_context
from common.url import parse_url
from ha_agent.broker_check import BrokerCheck, PromoteRefused
from ha_agent.promotion import PRIMARY_STATES, BrokerView
from ha_agent.settings import AgentSettings
from ha_agent.supervisor import BrokerSupervisor
from ha_agent.zk_auth import zk_security

__all__ = ["RISK", "DesignatedPrimary", "PeerStatus", "designated_epoch", "refusal"]

_log = structlog.get_logger("ha_agent.designated", component="agent")

#: What the override may lose, in the ``designated_primary`` event.
RISK = (
    "running as primary WITHOUT ZooKeeper by the operator's --designated-primary: messages "
    "the other broker confirmed after this broker left the in-sync set are lost; a peer "
    "still serving unseen (a partition) makes two primaries"
)


@dataclass(frozen=True)
class PeerStatus:
    """What one check of the other broker found: ``state`` None when it did not answer."""

    address: str
    via: str  # "management" or "amqp"
    state: str | None
    epoch: int = 0


def refusal(local: BrokerView | None, peers: Sequence[PeerStatus], zookeeper_answers: bool) -> str:
    """Why the local broker may not be designated primary now ("" when it may)."""
    if local is None:
        return "the local broker does not answer"
    serving = [p for p in peers if p.state in PRIMARY_STATES]
    if serving:
        peer = serving[0]
        return (
            f"{peer.address} answers as primary ({peer.state}, checked over {peer.via}): "
            "two primaries lose confirmed messages; stop it first"
        )
    if local.ha_state == "catch-up":
        return "the broker is still catching up: it lacks messages the primary confirmed"
    if not local.is_primary and local.ha_state not in ("ready", "joining"):
        return f"the broker is {local.ha_state}"
    if zookeeper_answers:
        return (
            "ZooKeeper answers (a quorum): the agents decide; run qpid-ha-agent without "
            "--designated-primary"
        )
    return ""


def designated_epoch(local: BrokerView, peers: Sequence[PeerStatus]) -> int:
    """An epoch above every one seen: the local broker's and the peers' that answered."""
    return max([local.epoch, *(p.epoch for p in peers)]) + 1


class DesignatedPrimary:
    """See the module docstring. :meth:`run` until :meth:`stop`; 1 with :attr:`refusal`."""

    def __init__(self, settings: AgentSettings) -> None:
        settings.check()
        self.settings = settings
        self.broker_check = BrokerCheck(  # its own broker: refuses promotions by hand
            settings.broker, timeout=min(2.0, settings.check_interval * 4), agent=settings.node
        )
        try:
            self.peers = [BrokerCheck(peer, timeout=2.0) for peer in settings.peers]
        except ValueError as exc:
            raise ValueError(f"--peer: {exc}") from None
        self.supervisor: BrokerSupervisor | None = None
        self.epoch: int | None = None  # the epoch it promoted its broker with
        self.refusal = ""
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        s = self.settings
        set_log_context(cluster=s.cluster, node=s.node, component="agent")
        _log.warning(
            "agent_started",
            zk=s.zk_hosts,
            broker=self.broker_check.address,
            supervise=s.broker_command is not None,
            designated_primary=True,
            peers=[p.address for p in self.peers],
        )
        if s.broker_command is not None:
            self.supervisor = BrokerSupervisor(
                s.broker_command, log_file=s.broker_log, on_exit=self._broker_exited
            ).start()
        try:
            wait = 0.0
            while not self._stop.wait(wait):
                wait = s.check_interval
                if not self._check():
                    return 1
        finally:
            _log.info("agent_stopping")
            if self.supervisor is not None:
                self.supervisor.stop()
            _log.info("agent_stopped")
        return 0

    def _broker_exited(self, code: int) -> None:
        if self.supervisor is not None and self.supervisor.shut_down:
            self.stop()

    def _check(self) -> bool:
        """One check; False once refused."""
        view = self.broker_check.check()
        if view is None:
            return True  # starting, or restarting: wait for it
        if view.is_primary and self.epoch is not None and view.epoch >= self.epoch:
            self._keep_in_sync(view)
            return True
        peers = self._check_peers()
        reason = refusal(view, peers, zookeeper_answers=False)
        if not reason and not view.is_primary:
            reason = refusal(view, peers, zookeeper_answers=self._zookeeper_answers())
        if reason:
            self.refusal = f"designated primary refused: {reason}"
            _log.error(
                "designated_primary_refused",
                reason=reason,
                ha_state=view.ha_state,
                peers=[_peer_field(p) for p in peers],
            )
            return False
        if view.is_primary:  # already primary (this agent restarted): keep it, as it is
            self.epoch = view.epoch
            return True
        return self._promote(view, peers)

    def _promote(self, view: BrokerView, peers: Sequence[PeerStatus]) -> bool:
        epoch = designated_epoch(view, peers)
        try:
            answer = self.broker_check.promote(epoch, timeout=30.0, in_sync=[])
        except PromoteRefused as exc:
            self.refusal = f"designated primary refused: the broker refused: {exc}"
            _log.error("designated_primary_refused", reason=str(exc), ha_state=view.ha_state)
            return False
        except ManagementError as exc:
            _log.warning("promotion_failed", reason=str(exc))
            return True  # tried again at the next check
        self.epoch = epoch
        set_log_context(epoch=epoch)  # agent events: the epoch it promoted its broker with
        _log.critical(
            "designated_primary",
            new_epoch=epoch,
            ha_state=answer.get("state"),
            was=view.ha_state,
            store_id=view.store_id,
            peers=[_peer_field(p) for p in peers],
            risk=RISK,
        )
        return True

    def _keep_in_sync(self, view: BrokerView) -> None:
        """The designated agent is the only cluster manager: a backup that went away leaves
        the in-sync set at once (its held confirms are released)."""
        in_sync, epoch = view.in_sync, self.epoch
        if in_sync is None or not in_sync.pending_removal or epoch is None:
            return
        members = sorted(in_sync.wanted - in_sync.pending_removal)
        try:
            answer = self.broker_check.commit_in_sync(epoch, members)
        except (PromoteRefused, ManagementError) as exc:
            _log.warning("in_sync_post_failed", reason=str(exc))
            return
        _log.info(
            "in_sync_committed",
            in_sync_epoch=epoch,
            version=None,
            members=members,
            removed=sorted(in_sync.pending_removal),
            released=answer.get("released"),
            pending_removal=answer.get("pending_removal"),
        )

    # -- checks ---------------------------------------------------------------------------
    def _check_peers(self) -> list[PeerStatus]:
        """Each ``--peer`` over its management API, and every AMQP address the local broker
        knows of (but its own) over AMQP."""
        found = []
        for peer in self.peers:
            view = peer.check()
            state = None if view is None else view.ha_state
            epoch = 0 if view is None else view.epoch
            found.append(PeerStatus(peer.address, "management", state, epoch))
        for address in self._amqp_addresses():
            state = asyncio.run(check_status(parse_url(address).addresses[0]))
            found.append(PeerStatus(address, "amqp", state))
        return found

    def _amqp_addresses(self) -> list[str]:
        try:
            ha: Any = self.broker_check.client.get("/api/ha?queues=summary")
        except ManagementError:
            return []
        if not isinstance(ha, dict):
            return []
        own = {ha.get("url"), ha.get("public_url")}
        known = {ha.get("primary")} | {
            m.get("url") for m in ha.get("members") or [] if isinstance(m, dict)
        }
        addresses = []
        for address in sorted(a for a in known if isinstance(a, str) and a and a not in own):
            with contextlib.suppress(ValueError):
                parse_url(address)
                addresses.append(address)
        return addresses

    def _zookeeper_answers(self) -> bool:
        """Whether a ZooKeeper session can be had within the session timeout (a quorum)."""
        s = self.settings
        client = KazooClient(
            hosts=s.zk_hosts,
            timeout=s.session_timeout,
            connection_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5},
            **zk_security(s.zk_auth, s.zk_tls),
        )
        try:
            client.start(timeout=s.session_timeout)
        except Exception:  # no quorum, no server: the session cannot be had
            return False
        finally:
            with contextlib.suppress(Exception):
                client.stop()
                client.close()
        return True


def _peer_field(peer: PeerStatus) -> dict[str, Any]:
    return {"address": peer.address, "via": peer.via, "state": peer.state, "epoch": peer.epoch}
