"""What a ``qpid-ha`` command runs with, passed down in typer's context, never kept in a
module (httpie's ``Environment``).

- :class:`Environment`: what the command touches outside itself, the output streams and
  the factories of the management client and of the ZooKeeper reader. Tests give their
  own: ``CliRunner().invoke(app, args, obj=Environment(...))``.
- :class:`CliSettings`: the global options (``-b``, ``--timeout``, ``--cluster-manager``,
  ``--zk``, ``--cluster``), parsed, with the environment. The root callback
  (:mod:`qpid_ha_cli.main`) puts it in ``ctx.obj``; commands get it with
  :func:`settings`.

Both are frozen: a command cannot change what the next one sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TextIO

import typer

from broker.management.client import ManagementClient
from common.url import BrokerUrl

if TYPE_CHECKING:  # typer's vendored click: the type of every context typer makes
    from typer._click import Context

    from ha_agent.zk_auth import ZkAuth
    from ha_agent.zk_tls import ZkTls

__all__ = [
    "DEFAULT_CREDENTIALS",
    "DEFAULT_MGMT_PORT",
    "CliSettings",
    "Environment",
    "counted",
    "environment",
    "settings",
    "with_default_credentials",
]

DEFAULT_MGMT_PORT = 8672
#: The built-in user every verb logs in as when ``-b`` names none (as the drill does).
DEFAULT_CREDENTIALS = ("guest", "guest")


def with_default_credentials(url: BrokerUrl) -> BrokerUrl:
    """``url``, with the built-in user when it names none."""
    if url.user is not None:
        return url
    user, password = DEFAULT_CREDENTIALS
    return replace(url, user=user, password=password)


def read_cluster(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """:func:`qpid_ha_cli.cluster_view.read_cluster`. The cluster view (kazoo, the agent's
    records) is imported by the commands that read ZooKeeper, not at every qpid-ha start
    (an OCF monitor runs one or two): tests/test_start_up.py."""
    from qpid_ha_cli import cluster_view

    return cluster_view.read_cluster(*args, **kwargs)


def read_clusters(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """:func:`qpid_ha_cli.cluster_view.read_clusters`, imported as :func:`read_cluster`."""
    from qpid_ha_cli import cluster_view

    return cluster_view.read_clusters(*args, **kwargs)


@dataclass(frozen=True)
class Environment:
    """Streams and factories. A stream left None is the process's ``sys.stdout`` or
    ``sys.stderr`` at the time of writing (which is what ``CliRunner`` captures)."""

    stdout: TextIO | None = None
    stderr: TextIO | None = None
    management_client: Callable[[BrokerUrl, float], ManagementClient] = ManagementClient
    read_cluster: Callable[..., dict[str, Any]] = read_cluster
    read_clusters: Callable[..., list[dict[str, Any]]] = read_clusters

    def out(self, text: str) -> None:
        """One line of the command's output."""
        typer.echo(text, file=self.stdout)

    def err(self, text: str) -> None:
        """One line on the error stream."""
        typer.echo(text, file=self.stderr, err=True)


@dataclass(frozen=True)
class CliSettings:
    """The global options of one ``qpid-ha`` run."""

    broker: BrokerUrl
    timeout: float = 10.0
    cluster_manager: bool = False
    zk: str | None = None
    cluster: str | None = None
    zk_auth: ZkAuth | None = None  #: --zk-auth: the agents' ZooKeeper digest
    zk_tls: ZkTls | None = None  #: --zk-ssl*: TLS to ZooKeeper
    env: Environment = field(default_factory=Environment)

    def call(
        self, path: str, body: dict[str, Any] | None = None, *, method: str | None = None
    ) -> Any:
        """GET ``path`` (POST ``body``; or ``method``) on the broker's management API; its
        JSON answer.

        :raises broker.management.client.ManagementError: mapped to an exit code by
            :mod:`qpid_ha_cli.main`.
        """
        return self.at(0, path, body, method=method)

    def at(
        self,
        index: int,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        method: str | None = None,
    ) -> Any:
        """:meth:`call` on the ``index``-th address of ``-b`` (a list for some verbs)."""
        address = self.broker.addresses[index]
        url = replace(self.broker, addresses=(address,))
        client = self.env.management_client(url, self.timeout)
        if method is None:
            return client.call(path, body)
        return client.call(path, body, method=method)


def settings(ctx: Context) -> CliSettings:
    """The run's settings, put in the context by the root callback."""
    found = ctx.find_object(CliSettings)
    if found is None:  # pragma: no cover - the root callback always runs first
        raise RuntimeError("qpid-ha: no settings in the context")
    return found


def environment(ctx: Context) -> Environment:
    """The run's environment: the settings' when the root callback has run, else the one a
    caller passed as ``obj``, else the process's."""
    found = ctx.find_object(CliSettings)
    if found is not None:
        return found.env
    given = ctx.find_object(Environment)
    return given if given is not None else Environment()


def counted(count: int, noun: str) -> str:
    """``1 queue``, ``2 queues``, ``0 queues``: a count and its noun for people (the nouns
    the CLI counts take an ``s``)."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
