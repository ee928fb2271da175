"""The virtual IP: on the primary's node only, announced with a gratuitous ARP.

:Status: Beta

:class:`VirtualIp` adds ``ADDR/PREFIX`` to an interface (``ip addr add``) and announces it
(``arping -U``, in a thread of its own: iputils' arping waits a second after sending, and the
agent's loop, which takes the address right after a promotion, must renew the new primary's
lease meanwhile) so that the clients' neighbour caches learn the new MAC at once; it removes
it on fence, when the agent stops, and when an agent starts (a leftover of an agent that
died holding it). Both operations are idempotent. ``netns`` runs the
commands inside a network namespace (the tests' hosts); the agent normally runs in the
node's own namespace and leaves it None.

:func:`parse_vip` checks the ``--vip`` value (pure).

Error Handling
==============

- :func:`parse_vip` raises ValueError naming the bad value (the command line: exit 2).
- :meth:`VirtualIp.take` and :meth:`VirtualIp.drop` raise :class:`VipError` with the
  command's own error line when ``ip`` fails for another reason than "already there" /
  "not there"; a failed ``arping`` is logged only (the address works, clients may just
  take longer to find it).
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import threading

import structlog

__all__ = ["VipError", "VirtualIp", "parse_vip"]

_log = structlog.get_logger("ha_agent.vip", component="agent")


class VipError(Exception):
    """``ip`` failed to add or remove the virtual IP."""


def parse_vip(text: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    """``ADDR/PREFIX`` as an interface address; ValueError naming ``text`` otherwise."""
    if "/" not in text:
        raise ValueError(f"bad virtual IP {text!r}: expected ADDR/PREFIX, e.g. 10.0.0.100/24")
    try:
        return ipaddress.ip_interface(text)
    except ValueError:
        raise ValueError(f"bad virtual IP {text!r}: expected ADDR/PREFIX") from None


class VirtualIp:
    """One virtual IP on one interface. THREAD UNSAFE: the agent's loop owns it."""

    def __init__(self, vip: str, interface: str, *, netns: str | None = None) -> None:
        self.address = parse_vip(vip)
        self.interface = interface
        self.netns = netns
        self.held = False
        #: the latest announcement's thread (None before the first)
        self.announcing: threading.Thread | None = None

    def _ip(self) -> list[str]:
        ip = shutil.which("ip") or "/usr/sbin/ip"
        return [ip, "-n", self.netns] if self.netns else [ip]

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)

    def take(self) -> bool:
        """Add the address and announce it; True when it was added now."""
        result = self._run([*self._ip(), "addr", "add", str(self.address), "dev", self.interface])
        added = result.returncode == 0
        # Already on this interface ("File exists"; newer iproute2: "Address already
        # assigned"): held, as the agent wants.
        there = "File exists" in result.stderr or "already assigned" in result.stderr
        if not added and not there:
            raise VipError(
                f"cannot add {self.address} to {self.interface}: {result.stderr.strip()}"
            )
        announce = added or not self.held
        self.held = True
        if added:
            _log.info("vip_added", vip=str(self.address), interface=self.interface)
        if announce:
            self.announcing = threading.Thread(
                target=self._announce, name="vip-announce", daemon=True
            )
            self.announcing.start()
        return added

    def _announce(self) -> None:
        """``arping -U -c 1``: it sends at once, then waits a second for replies (iputils),
        so it runs in its own thread (the loop renews the broker's lease meanwhile)."""
        arping = shutil.which("arping") or "/usr/sbin/arping"
        if self.address.version != 4:
            return  # IPv6 neighbours learn through unsolicited NA, sent by the kernel (DAD)
        argv = [arping, "-q", "-U", "-c", "1", "-I", self.interface, "-s"]
        argv += [str(self.address.ip), str(self.address.ip)]
        if self.netns:
            argv = [shutil.which("ip") or "/usr/sbin/ip", "netns", "exec", self.netns, *argv]
        try:
            result = self._run(argv)
        except (OSError, subprocess.TimeoutExpired) as exc:
            _log.warning("vip_announce_failed", vip=str(self.address), reason=str(exc))
            return
        if result.returncode != 0:
            _log.warning("vip_announce_failed", vip=str(self.address), reason=result.stderr.strip())

    def drop(self) -> bool:
        """Remove the address; True when it was there."""
        result = self._run([*self._ip(), "addr", "del", str(self.address), "dev", self.interface])
        self.held = False
        if result.returncode == 0:
            _log.info("vip_removed", vip=str(self.address), interface=self.interface)
            return True
        if "Cannot assign" in result.stderr or "not found" in result.stderr.lower():
            return False
        raise VipError(
            f"cannot remove {self.address} from {self.interface}: {result.stderr.strip()}"
        )
