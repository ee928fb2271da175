"""A promotion is one multi-op on a real ZooKeeper (issue 26, item 1).

Two candidates that read the same state: one commits, the other's transaction applies
nothing. A takeover deletes the old record and creates the new, ephemeral one: the old
session's expiry then leaves the new record alone (a ``setData`` on the old node would have
been deleted with it). A change of the set commits only while no epoch was taken since its
read. And a promotion whose answer was lost (a relay drops it, then cuts the connection
once ZooKeeper committed) is read back over the new connection as committed, where sending
it again would fail on its own commit.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from common.polling import poll_until
from ha_agent.epoch_counter import next_epoch, read_counter
from ha_agent.in_sync import VersionedInSync, read_in_sync, write_in_sync
from ha_agent.primary_record import encode_primary, read_primary_versioned
from ha_agent.promotion import BrokerView, InSyncMember, InSyncRecord, PrimaryRecord
from ha_agent.promotion_txn import (
    PromotionConflict,
    commit_promotion,
    commit_reclaim,
    needs_lock,
    set_format,
)
from ha_agent.reclaim import reclaim
from ha_agent.takeover import AnyOf, OldPrimary, OldPrimaryGone, TakeoverView
from ha_agent.zk_commit import MultiConflict
from tests.agent.conftest import FAST_RECONNECT
from tests.zookeeper import expire_session


def isr(epoch: int, *ids: str) -> InSyncRecord:
    return InSyncRecord(epoch, tuple(InSyncMember(i, f"n-{i}") for i in ids), "s-p", "p")


def promote(client: Any, cluster: str, node: str, replace: OldPrimary | None = None) -> Any:
    """One candidate's promotion from what it reads now."""
    read = read_in_sync(client, cluster)
    counter = read_counter(client, cluster)
    epoch = counter[0] + 1
    return commit_promotion(
        client,
        cluster,
        counter=counter,
        minimum=1,
        read=read,
        record=isr(epoch, "b2"),
        format_=2,
        primary=encode_primary(PrimaryRecord(node, epoch, f"{node}:5672"), None),
        replace=replace,
    )


def test_of_two_candidates_that_read_the_same_state_one_commits(
    make_client: Any, cluster: str
) -> None:
    a, b = make_client(), make_client()
    write_in_sync(a, cluster, isr(1, "b1", "b2"), None)
    reads = [(c, read_in_sync(c, cluster), read_counter(c, cluster)) for c in (a, b)]
    outcomes: list[VersionedInSync | PromotionConflict] = []
    for client, read, counter in reads:  # both decided on the same read
        try:
            outcomes.append(
                commit_promotion(
                    client,
                    cluster,
                    counter=counter,
                    minimum=1,
                    read=read,
                    record=isr(counter[0] + 1, "b2"),
                    format_=2,
                    primary=encode_primary(PrimaryRecord(f"n{len(outcomes)}", 1), None),
                )
            )
        except PromotionConflict as exc:
            outcomes.append(exc)
    assert isinstance(outcomes[0], VersionedInSync) and isinstance(outcomes[1], PromotionConflict)
    assert "an epoch was taken since the read" in str(outcomes[1])
    old = read_primary_versioned(b, cluster)
    assert old is not None and old.record == PrimaryRecord("n0", 1)
    assert old.owner == a.client_id[0]
    assert read_counter(b, cluster)[0] == 1 and read_in_sync(b, cluster) == outcomes[0]
    # the loser, reading again, finds the record: today's rule does not let it take over
    rule = AnyOf(OldPrimaryGone())
    answer = rule.may_take_over(TakeoverView(old))
    assert not answer.allowed and "n0 (epoch 1)" in answer.reason
    assert rule.may_take_over(TakeoverView(None)).allowed


def test_a_takeover_replaces_the_record_and_survives_the_old_sessions_expiry(
    zookeeper: Any, make_client: Any, cluster: str
) -> None:
    old_agent, candidate, late = make_client(), make_client(), make_client()
    promote(old_agent, cluster, "n1")
    seen = read_primary_versioned(candidate, cluster)
    assert seen is not None and seen.owner == old_agent.client_id[0]
    stale = (read_in_sync(late, cluster), read_counter(late, cluster))
    promote(candidate, cluster, "n2", replace=seen)  # a rule that allows replacing it
    expire_session(old_agent, zookeeper.hosts)  # the old primary's session ends later
    now = read_primary_versioned(candidate, cluster)
    assert now is not None and now.record == PrimaryRecord("n2", 2, "n2:5672")
    assert now.owner == candidate.client_id[0]
    # a takeover decided on the same, older read commits nothing (the new record's
    # version is 0 again: the epoch and the set's versions are what refuse it)
    with pytest.raises(PromotionConflict, match="an epoch was taken since"):
        commit_promotion(
            late,
            cluster,
            counter=stale[1],
            minimum=1,
            read=stale[0],
            record=isr(2, "b2"),
            format_=2,
            primary=encode_primary(PrimaryRecord("n3", 2), None),
            replace=seen,
        )
    assert read_primary_versioned(late, cluster) == now


def test_a_change_of_the_set_commits_only_while_no_epoch_was_taken(zk: Any, cluster: str) -> None:
    first = write_in_sync(zk, cluster, isr(1, "b1", "b2"), None)
    _, version = read_counter(zk, cluster)
    second = write_in_sync(zk, cluster, isr(1, "b1"), first, 1, epoch_version=version)
    assert read_in_sync(zk, cluster) == second and second.version == first.version + 1
    next_epoch(zk, cluster)  # a promotion took an epoch since the read
    with pytest.raises(MultiConflict, match=r"check .*/epoch: BadVersionError"):
        write_in_sync(zk, cluster, isr(1), second, 1, epoch_version=version)
    assert read_in_sync(zk, cluster) == second


def test_the_lock_is_taken_until_every_member_wrote_format_2(zk: Any, cluster: str) -> None:
    assert needs_lock(None)
    one = write_in_sync(zk, cluster, isr(1), None)
    assert needs_lock(read_in_sync(zk, cluster)) and one.format == 1
    two = write_in_sync(zk, cluster, isr(1, "b"), one, 2)
    assert read_in_sync(zk, cluster) == two and not needs_lock(two)
    assert set_format({}, two) == 2  # never back to 1


class AnswerCutter:
    """A TCP relay between one kazoo client and the real server that can lose the
    server's answers: :meth:`hold` stops passing them on (they are dropped), :meth:`cut`
    closes every connection through it, and new connections are relayed whole again."""

    def __init__(self, server: str) -> None:
        host, port = server.rsplit(":", 1)
        self.server = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.hosts = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.links: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.server, timeout=10)
            upstream.settimeout(None)
            held = threading.Event()
            with self.lock:
                self.links.append((client, upstream, held))
            threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, held), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, held: threading.Event | None) -> None:
        try:
            while chunk := source.recv(65536):
                if held is None or not held.is_set():
                    sink.sendall(chunk)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def hold(self) -> None:
        """From now on the server's answers on the open connections are dropped."""
        with self.lock:
            for _, _, held in self.links:
                held.set()

    def cut(self) -> None:
        """Close every open connection (both sides); later ones are relayed whole."""
        with self.lock:
            links, self.links = self.links, []
        for client, upstream, _ in links:
            for sock in (client, upstream):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()
        self.cut()


class LostAfterCommit:
    """A real client whose next multi-op ZooKeeper commits while its answer is lost: the
    relay drops the server's answers, a second client sees the commit, then the relay cuts
    the connection (kazoo's own ConnectionLoss) and the client reconnects to its session."""

    def __init__(self, client: KazooClient, relay: AnswerCutter, witness: KazooClient) -> None:
        self.client, self.relay, self.witness = client, relay, witness
        self.lost: list[ConnectionLoss] = []  # the answers kazoo reported lost

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def transaction(self) -> Any:
        real = self.client.transaction()
        relay, witness, lost = self.relay, self.witness, self.lost

        class Transaction:
            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

            def commit(self) -> list[Any]:
                path = next(op.path for op in real.operations if type(op).__name__ == "Create")

                def cut_once_committed() -> None:
                    poll_until(lambda: witness.exists(path) is not None, 30, f"{path} created")
                    relay.cut()

                relay.hold()
                cutter = threading.Thread(target=cut_once_committed, daemon=True)
                cutter.start()
                try:
                    return list(real.commit())
                except ConnectionLoss as exc:  # its answer never came
                    lost.append(exc)
                    raise
                finally:
                    cutter.join(timeout=35)

        return Transaction()


def test_a_promotion_whose_answer_was_lost_is_read_back_as_committed(
    zookeeper: Any, make_client: Any, cluster: str
) -> None:
    relay = AnswerCutter(zookeeper.hosts)
    client = KazooClient(
        hosts=relay.hosts,
        timeout=10.0,
        connection_retry=dict(FAST_RECONNECT),
        command_retry={"max_tries": -1, "delay": 0.05, "max_delay": 0.5, "deadline": 60},
    )
    client.start(timeout=10)
    try:
        lossy = LostAfterCommit(client, relay, make_client())
        committed = promote(lossy, cluster, "n1")  # read back: committed, no conflict
        assert len(lossy.lost) == 1
        assert committed.record.epoch == 1 and committed.format == 2
        old = read_primary_versioned(client, cluster)
        assert old is not None and old.record == PrimaryRecord("n1", 1, "n1:5672")
        assert old.owner == client.client_id[0]
        with pytest.raises(PromotionConflict):  # what a retry of it would have said
            commit_promotion(
                client,
                cluster,
                counter=(0, 0),
                minimum=1,
                read=None,
                record=committed.record,
                format_=2,
                primary=encode_primary(PrimaryRecord("n1", 1, "n1:5672"), None),
            )
    finally:
        client.stop()
        client.close()
        relay.close()


def test_an_agent_takes_its_record_back_after_its_session_expired_only_if_nothing_changed(
    zookeeper: Any, make_client: Any, cluster: str
) -> None:
    """Issue 26, item 2 (ha_agent.reclaim): a primary that served on its members' grants
    through a ZooKeeper outage; its agent's session expired with its record. The agent, on
    a new session, re-creates the record at the same epoch only while nothing changed; a
    promotion since (a new epoch) or a change of the set refuses it."""
    old_session, agent, other = make_client(), make_client(), make_client()
    promote(old_session, cluster, "n1")
    expire_session(old_session, zookeeper.hosts)
    assert read_primary_versioned(agent, cluster) is None
    serving = BrokerView("active", epoch=1, url="n1:5672", on_grants=True)
    assert reclaim(agent, cluster, "n1", None, serving, 1) is None
    back = read_primary_versioned(other, cluster)
    assert back is not None and back.record == PrimaryRecord("n1", 1, "n1:5672")
    assert back.owner == agent.client_id[0]
    assert reclaim(agent, cluster, "n1", None, serving, 1) is None  # its own already
    assert "another primary record" in str(reclaim(other, cluster, "n3", None, serving, 1))
    expire_session(agent, zookeeper.hosts)
    promote(other, cluster, "n2")  # a member promoted meanwhile: epoch 2
    fresh = make_client()
    why = reclaim(fresh, cluster, "n1", None, serving, 1)
    assert why == "the in-sync set is at epoch 2, not 1"
    fenced = BrokerView("active", epoch=2, url="n1:5672")  # not on grants (fenced, empty set)
    assert "no longer the primary" in str(reclaim(fresh, cluster, "n1", None, fenced, 2))
    # the set changed since the read: the multi-op's check refuses it
    read = read_in_sync(fresh, cluster)
    assert read is not None
    counter = read_counter(fresh, cluster)
    write_in_sync(other, cluster, isr(2), read)
    with pytest.raises(PromotionConflict, match="the in-sync set changed since the read"):
        commit_reclaim(
            fresh,
            cluster,
            counter=counter,
            read=read,
            primary=encode_primary(PrimaryRecord("n2", 2), None),
        )
