"""The read-only verbs of ``qpid-ha``: ``ping``, ``status``, ``query`` and ``ready``.

Contract
========

- They only read: GETs on the broker's management API, or, for ``--zk/--cluster status
  --all``, the agents' records in ZooKeeper (:mod:`qpid_ha_cli.cluster_view`).
- Output goes to the environment's stdout (:mod:`qpid_ha_cli.context`). A check that does
  not hold (``status --expect``/``--is-primary``, ``ready``) exits ERROR 1 with no message;
  every failure is raised (``ManagementError``, ``ClusterViewError``, ``CommandError``) and
  mapped to its exit code and one line in :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from broker.ha.state import HaState
from broker.management.client import ManagementError
from common.exit_status import CommandError, ExitStatus
from qpid_ha_cli.command_line import command_settings
from qpid_ha_cli.context import CliSettings, settings

__all__ = ["PRIMARY_STATES", "app"]

app = typer.Typer(rich_markup_mode=None)

PRIMARY_STATES = ("active", "recovering")
#: States of a backup, whose status shows why its link is down (:func:`_problem_lines`).
BACKUP_STATES = ("joining", "catch-up", "ready")


@app.command(**command_settings())
def ping(ctx: typer.Context) -> None:
    """Check that the broker answers; exit 0 when it does."""
    settings(ctx).call("/api/status")


@app.command(**command_settings())
def status(
    ctx: typer.Context,
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect",
            help="exit 1 unless in this state (standalone, joining, catch-up, ready,"
            " recovering, active); 'primary' means active or recovering; another name is"
            " a wrong use (exit 2)",
        ),
    ] = None,
    is_primary: Annotated[
        bool, typer.Option("--is-primary", help="exit 1 unless the broker is the primary")
    ] = False,
    show_all: Annotated[
        bool, typer.Option("--all", help="show every member of the cluster")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """Print the broker's HA state (and with --all, every member's).

    A backup whose link to the primary is down prints why on a second line
    ("link: ADDRESS: REASON ..."), and its latest replication error ("replication error:
    OBJECT: REASON ..."); a primary prints a line for each backup whose replication failed
    ("backup URL (ID): replication error: ...": which backup, which object, why). A broker
    with a store (--data-dir) prints how it found its store when it started: "store:
    empty|clean|dirty at start" (not the store's state now; not with --is-primary or
    --expect, whose output stays one line for scripts).

    With --zk and --cluster, --all shows the cluster as the agents record it in ZooKeeper:
    members, states, epochs, whether each is in the in-sync set, the primary and the
    virtual IP owner; with more than one member serving as primary it says so on a last
    "warning:" line and exits 1. With --zk alone, --all shows every cluster on that
    ZooKeeper, a line each (its primary's node, epoch and URL, its in-sync set), and how
    many primaries each node runs (several clusters on one set of nodes: docs/deploy.md).
    """
    s = settings(ctx)
    out = s.env.out
    if expect is not None:
        expect = _expected_state(expect)
    if s.zk is not None:
        if not show_all:
            raise CommandError("with --zk, use status --all", ExitStatus.USAGE)
        if s.cluster is None:
            _zk_clusters(s, s.zk, as_json)
        else:
            _zk_status(s, s.zk, s.cluster, as_json)
        return
    data = s.call("/api/status")
    state = str(data.get("ha_state", "unknown"))
    if show_all:
        if state == "standalone":
            raise CommandError(
                f"{s.broker.addresses[0]} is a stand-alone broker, not a cluster member:"
                " status --all lists a cluster's members",
                ExitStatus.ERROR,
            )
        ha = s.call("/api/ha?queues=summary")
        members = list(ha.get("members") or [])
        if as_json:
            out(json.dumps(members, indent=2, sort_keys=True))
        else:
            out(f"{'ADDRESS':<28} {'STATE':<12} ID")
            for member in members:
                out(f"{member['url']:<28} {member['state']:<12} {member['id']}")
            if ha.get("public_url"):
                out(f"public URL (for clients): {ha['public_url']}")
    elif as_json:
        out(json.dumps(data, indent=2, sort_keys=True))
    else:
        out(state)
        if state in BACKUP_STATES or (state in PRIMARY_STATES and not is_primary):
            for line in _problem_lines(s, state):
                out(line)
        store = data.get("store_status")
        if store not in (None, "none", "unknown") and not is_primary and expect is None:
            # empty, clean or dirty: how the store was found at start (docs/store.md)
            out(f"store: {store} at start")
    wanted = "primary" if is_primary else expect
    if wanted is not None:
        holds = state in PRIMARY_STATES if wanted == "primary" else state == wanted
        if not holds:
            raise typer.Exit(ExitStatus.ERROR)


def _expected_state(text: str) -> str:
    """``--expect``'s value as a state name ("catchup" is catch-up; "primary" as it is).

    :raises CommandError: USAGE for a name that is no state: a typo must not read as a
        broker in another state (exit 1)."""
    if text.strip().lower() == "primary":
        return "primary"
    try:
        return HaState.parse(text).value
    except ValueError:
        names = ", ".join(state.value for state in HaState)
        raise CommandError(
            f"--expect {text!r}: expected one of {names} or primary", ExitStatus.USAGE
        ) from None


def _problem_lines(s: CliSettings, state: str) -> list[str]:
    """The status lines after the state: on a backup, why its link to the primary is not up
    (``/api/ha``'s ``link_error``: "link: ...") and its latest replication error
    ("replication error: OBJECT: REASON ..."); on a primary, each backup whose replication
    failed ("backup URL (ID): replication error: ..."). Best effort: the state line stands
    alone when ``/api/ha`` cannot be read (e.g. no credentials for a broker with
    authentication on)."""
    try:
        ha = s.call("/api/ha?queues=summary")
    except ManagementError:
        return []
    lines = []
    if state in BACKUP_STATES:
        link = ha.get("link_error")
        if link:
            lines.append(
                f"link: {link['address']}: {link['reason']}"
                f" ({link['count']} failed dials since {link['since']})"
            )
        error = ha.get("replication_error")
        if error:
            lines.append(f"replication error: {_error_text(error)}")
    for error in ha.get("replication_errors") or []:
        lines.append(
            f"backup {error.get('url')} ({error.get('backup')}): replication error:"
            f" {_error_text(error)}"
        )
    return lines


def _error_text(error: dict[str, object]) -> str:
    count = error.get("count")
    times = "once" if count == 1 else f"{count} times"
    return f"{error.get('reason')} ({times} since {error.get('since')})"


# The cluster view (kazoo, the agent's records) is imported by status --zk alone, not at
# every qpid-ha start (an OCF monitor runs one or two): tests/test_start_up.py.
def _zk_clusters(s: CliSettings, hosts: str, as_json: bool) -> None:
    from qpid_ha_cli.cluster_view import format_clusters, two_primaries

    views = s.env.read_clusters(hosts, s.timeout, auth=s.zk_auth, tls=s.zk_tls)
    if as_json:
        s.env.out(json.dumps(views, indent=2, sort_keys=True))
    else:
        for line in format_clusters(views):
            s.env.out(line)
    if any("error" not in view and two_primaries(view) for view in views):
        raise typer.Exit(ExitStatus.ERROR)


def _zk_status(s: CliSettings, hosts: str, cluster: str, as_json: bool) -> None:
    from qpid_ha_cli.cluster_view import format_cluster, two_primaries

    try:
        view = s.env.read_cluster(hosts, cluster, s.timeout, auth=s.zk_auth, tls=s.zk_tls)
    except ValueError as exc:  # a bad cluster name
        raise CommandError(str(exc), ExitStatus.USAGE) from exc
    if as_json:
        s.env.out(json.dumps(view, indent=2, sort_keys=True))
    else:
        for line in format_cluster(view):
            s.env.out(line)
    if two_primaries(view):  # two brokers confirming apart: not a healthy cluster
        raise typer.Exit(ExitStatus.ERROR)


@app.command(**command_settings())
def query(
    ctx: typer.Context,
    show_all: Annotated[bool, typer.Option("--all", help="include every member")] = False,
) -> None:
    """Print the broker's HA status in detail (JSON)."""
    s = settings(ctx)
    data = s.call("/api/ha")
    if not show_all:
        data = {k: v for k, v in data.items() if k != "members"}
    s.env.out(json.dumps(data, indent=2, sort_keys=True))


@app.command(**command_settings())
def ready(ctx: typer.Context) -> None:
    """Exit 0 for a ready backup or a primary, 1 otherwise."""
    s = settings(ctx)
    state = str(s.call("/api/status").get("ha_state", ""))
    s.env.out(state)
    if state not in ("ready", *PRIMARY_STATES):
        raise typer.Exit(ExitStatus.ERROR)
