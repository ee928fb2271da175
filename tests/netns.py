"""Several hosts on one machine for end-to-end tests: Linux network namespaces (root only).

A :class:`Lan` is a bridge in a namespace of its own and hosts plugged into it, each host a
namespace with ``lo`` and one ``eth0`` (a veth whose peer is a bridge port) holding
``10.77.<subnet>.<number>/24``. Every address lives inside the namespaces the test made;
nothing is routed to the outside. Namespace names are unique per run:
``qha-<8 hex>-<host>``.

- :meth:`Host.exec_argv` prefixes a command with ``ip netns exec NS`` (which execs it: the
  process keeps the PID the test sees, so it can be signalled by PID).
- :func:`call_in` (the nemesis drill's, re-exported) runs a function in a thread that has
  joined a namespace (``setns(2)`` on that thread only), so sockets it opens live there:
  quick health checks from the test process without one ``ip netns exec`` per poll.
- :meth:`Host.link` takes ``eth0`` down or up (a partition of that host),
  :meth:`Host.addresses` lists its IPv4 addresses (where the virtual IP is).
- :meth:`Lan.delete` removes every namespace it made (its veths go with them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from qpid_ha_cli.nemesis.topology import call_in

__all__ = ["IP", "Host", "Lan", "call_in", "is_root"]

IP = shutil.which("ip") or "/usr/sbin/ip"

T = TypeVar("T")


def is_root() -> bool:
    return os.geteuid() == 0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; RuntimeError with its error line when it fails and ``check``."""
    result = subprocess.run([IP, *args], capture_output=True, text=True, timeout=10, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


@dataclass
class Host:
    """One namespace on the LAN, ``eth0`` at ``address``/24."""

    name: str
    namespace: str
    address: str

    def exec_argv(self, argv: list[str]) -> list[str]:
        return [IP, "netns", "exec", self.namespace, *argv]

    def call(self, function: Callable[[], T]) -> T:
        return call_in(self.namespace, function)

    def addresses(self) -> list[str]:
        """IPv4 addresses on ``eth0`` (without prefix)."""
        out = ip("-n", self.namespace, "-o", "-4", "addr", "show", "dev", "eth0").stdout
        return [line.split()[3].split("/")[0] for line in out.splitlines() if " inet " in line]

    def link(self, up: bool) -> None:
        ip("-n", self.namespace, "link", "set", "eth0", "up" if up else "down")


@dataclass
class Lan:
    """A bridge namespace and hosts on ``10.77.<subnet>.0/24``; :meth:`delete` at the end."""

    subnet: int = 0
    prefix: str = field(default_factory=lambda: f"qha-{uuid.uuid4().hex[:8]}")
    hosts: dict[str, Host] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def address(self, number: int) -> str:
        return f"10.77.{self.subnet}.{number}"

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
        """Namespace ``<prefix>-<name>`` on the bridge, at ``10.77.<subnet>.<number>``."""
        host = Host(name, f"{self.prefix}-{name}", self.address(number))
        self._add_namespace(host.namespace)
        port = f"v-{name}"
        ip("-n", self.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0",
           "netns", host.namespace)  # fmt: skip
        ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
        ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip("-n", host.namespace, "link", "set", "eth0", "up")
        self.hosts[name] = host
        return host

    def delete(self) -> None:
        """``ip netns del`` every namespace made here, hosts first; errors ignored."""
        for namespace in reversed(self.namespaces):
            ip("netns", "del", namespace, check=False)
        self.namespaces.clear()
