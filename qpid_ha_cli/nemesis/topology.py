"""The nemesis drill's network: Linux network namespaces on one bridge, and nft rules.

:Status: Beta (the nemesis drill; root only)

A :class:`Lan` is a bridge (``br0``) in a namespace of its own and hosts plugged into it,
each host a namespace with ``lo`` and one ``eth0`` (a veth whose peer is a bridge port)
holding ``10.78.0.<number>/24``. Nothing is routed outside the namespaces made here.
Namespace names are unique per run: ``qnm-<6 hex>-<host>``.

- :meth:`Host.exec_argv` prefixes a command with ``ip netns exec NS``, which execs it: the
  process keeps the PID we see, so it is signalled by PID.
- :func:`call_in` runs a function in a new thread that joined a namespace (``setns(2)``
  on that thread only): sockets it opens, and threads it starts, live there.
- :meth:`Host.block` loads an nft table ``nemesis`` into the host's namespace that drops
  traffic to and from some addresses (optionally one TCP port only); :meth:`Host.unblock`
  deletes it. The table lives in the host's namespace, so it goes with the namespace.
- :meth:`Lan.delete` kills whatever still runs in its namespaces (``ip netns pids``: only
  processes started inside namespaces this run made) and deletes the namespaces, hosts
  first, the bridge's last. It is safe to call twice.

Error Handling
==============

A failing ``ip`` or ``nft`` raises :class:`TopologyError` with the command and its error
line; :meth:`Lan.delete` never raises (it is the clean-up path).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = [
    "SUBNET",
    "Host",
    "Lan",
    "TopologyError",
    "block_rules",
    "call_in",
    "enter",
    "in_namespace",
]

CLONE_NEWNET = 0x40000000
SUBNET = "10.78.0"
T = TypeVar("T")


class TopologyError(RuntimeError):
    """An ``ip`` or ``nft`` command failed: the command and its error line."""


def _run(argv: list[str], stdin: str | None = None) -> str:
    result = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, timeout=15, check=False
    )
    if result.returncode != 0:
        raise TopologyError(f"{' '.join(argv)}: {result.stderr.strip() or result.returncode}")
    return result.stdout


def ip(*args: str) -> str:
    return _run([shutil.which("ip") or "ip", *args])


def enter(namespace: str) -> None:
    """Move the calling thread into ``namespace`` (threads it starts later follow it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if int(libc.setns(fd, CLONE_NEWNET)) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def call_in(namespace: str, function: Callable[[], T]) -> T:
    """``function()`` in a new thread inside ``namespace``: its result or its exception."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            enter(namespace)
            outcome.append(function())
        except BaseException as exc:  # handed over to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"netns-{namespace}", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def in_namespace(pid: int, namespace: str) -> bool:
    """Whether process ``pid`` runs in ``namespace`` (so a recycled PID is never hit)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{namespace}").st_ino
    except OSError:
        return False


def block_rules(addresses: list[str], port: int | None = None) -> str:
    """The nft script of the ``nemesis`` table: drop every packet to or from ``addresses``
    (only TCP to or from ``port`` of theirs when given). Pure: text in, text out."""
    peers = ", ".join(addresses)
    if port is None:
        drop_in, drop_out = f"ip saddr {{ {peers} }} drop", f"ip daddr {{ {peers} }} drop"
    else:
        drop_in = f"ip saddr {{ {peers} }} tcp sport {port} drop"
        drop_out = f"ip daddr {{ {peers} }} tcp dport {port} drop"
    return (
        "table inet nemesis {\n"
        "  chain input {\n    type filter hook input priority 0; policy accept;\n"
        f"    {drop_in}\n  }}\n"
        "  chain output {\n    type filter hook output priority 0; policy accept;\n"
        f"    {drop_out}\n  }}\n"
        "}\n"
    )


@dataclass
class Host:
    """One namespace on the LAN, ``eth0`` at ``address``/24."""

    name: str
    namespace: str
    address: str
    blocked: bool = False

    def exec_argv(self, argv: list[str]) -> list[str]:
        return [shutil.which("ip") or "ip", "netns", "exec", self.namespace, *argv]

    def call(self, function: Callable[[], T]) -> T:
        return call_in(self.namespace, function)

    def block(self, addresses: list[str], port: int | None = None) -> None:
        """Drop traffic to and from ``addresses`` (TCP ``port`` only when given)."""
        self.unblock()
        nft = shutil.which("nft") or "nft"
        _run(["ip", "netns", "exec", self.namespace, nft, "-f", "-"], block_rules(addresses, port))
        self.blocked = True

    def unblock(self) -> None:
        if self.blocked:
            nft = shutil.which("nft") or "nft"
            _run(["ip", "netns", "exec", self.namespace, nft, "delete", "table", "inet", "nemesis"])
            self.blocked = False


@dataclass
class Lan:
    """A bridge namespace and hosts on ``10.78.0.0/24``; :meth:`delete` at the end."""

    prefix: str = field(default_factory=lambda: f"qnm-{uuid.uuid4().hex[:6]}")
    hosts: dict[str, Host] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def _add_namespace(self, namespace: str) -> None:
        ip("netns", "add", namespace)
        self.namespaces.append(namespace)
        ip("-n", namespace, "link", "set", "lo", "up")

    def start(self) -> Lan:
        self._add_namespace(self.bridge)
        ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge, "link", "set", "br0", "up")
        return self

    def add_host(self, name: str, number: int) -> Host:
        """Namespace ``<prefix>-<name>`` on the bridge, at ``10.78.0.<number>``."""
        host = Host(name, f"{self.prefix}-{name}", f"{SUBNET}.{number}")
        self._add_namespace(host.namespace)
        port = f"v-{name}"
        ip(
            "-n",
            self.bridge,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            host.namespace,
        )
        ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
        ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip("-n", host.namespace, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def pids(self) -> list[int]:
        """Every process still running in one of this LAN's namespaces."""
        found: list[int] = []
        for namespace in self.namespaces:
            with contextlib.suppress(TopologyError, subprocess.TimeoutExpired):
                found += [int(p) for p in ip("netns", "pids", namespace).split() if p.isdigit()]
        return found

    def delete(self) -> None:
        """SIGKILL what still runs in the namespaces, then delete them; never raises."""
        for pid in self.pids():
            if pid == os.getpid():
                continue  # our own threads may have joined a namespace; never ourselves
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
        for namespace in reversed(self.namespaces):
            with contextlib.suppress(TopologyError, subprocess.TimeoutExpired):
                ip("netns", "del", namespace)
        self.namespaces.clear()
