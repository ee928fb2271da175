"""The administrator's verbs of ``qpid-ha`` (seed 000's qpid-cluster, "cluster admin"):
``connections [--all]``, ``disconnect ID`` and ``stop-member MEMBER``.

Finding the members
===================

A cluster lists its members by their AMQP addresses (``status --all``); their management
APIs listen elsewhere. ``-b`` may therefore name several management addresses, comma
separated, for these verbs: the members are read from the first, and each member is
reached at the address of ``-b`` whose broker reports that member's id (``/api/ha``
``broker_id``); failing that, at the member's AMQP host with the first address's port
(every node on the same management port, the usual deployment), if the broker there has
that id. A member found nowhere is said so, never guessed: ``connections --all`` lists the
others and exits 1; ``stop-member`` stops nothing and exits 1.

Contract
========

- ``connections``: the AMQP connections of the ``-b`` broker (``GET /api/connections``), a
  table or ``--json``; ``--all``: of every member, with a MEMBER column.
- ``disconnect ID``: closes connection ID of the ``-b`` broker (320 CONNECTION_FORCED;
  ``DELETE /api/connections/ID``); a client reconnects through its URL list.
- ``stop-member MEMBER`` (an address or broker id as ``status --all`` lists them): asks
  that member to stop (``POST /api/admin/stop`` with its id, so a wrong address never stops
  another broker), then waits up to ``--timeout`` until its management API no longer
  answers. Exit 1 if it still answers.
- Failures are raised and mapped to one line and an exit code in :mod:`qpid_ha_cli.main`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer

from broker.management.client import ManagementError
from common.exit_status import CommandError, ExitStatus
from common.polling import PollTimeout, poll_until
from common.url import Address, BrokerUrl, parse_address
from qpid_ha_cli.command_line import command_settings
from qpid_ha_cli.context import CliSettings, settings

__all__ = ["MEMBER_LIST_VERBS", "app"]

app = typer.Typer(rich_markup_mode=None)

#: The verbs whose ``-b`` may list several management addresses.
MEMBER_LIST_VERBS = frozenset({"connections", "stop-member", "shutdown"})


@dataclass(frozen=True)
class Member:
    """A cluster member as its membership lists it, and where its management API is."""

    url: str
    state: str
    broker_id: str
    mgmt: int | Address | None  # an index into -b, a conventional address, or unknown


def _broker_id(s: CliSettings, index: int) -> str | None:
    try:
        ha = s.at(index, "/api/ha?queues=summary")
    except ManagementError as exc:
        if exc.status == 404:  # a stand-alone broker
            return None
        raise
    found = ha.get("broker_id")
    return found if isinstance(found, str) else None


def _members(s: CliSettings) -> list[Member]:
    """The members of the first ``-b`` broker's cluster and where to reach each; a
    stand-alone broker is its own only member (id "")."""
    try:
        ha = s.at(0, "/api/ha?queues=summary")
    except ManagementError as exc:
        if exc.status != 404:
            raise
        status = s.at(0, "/api/status")
        address = str(s.broker.addresses[0])
        return [Member(address, str(status.get("ha_state", "standalone")), "", 0)]
    listed = {i: _broker_id(s, i) for i in range(1, len(s.broker.addresses))}
    listed[0] = ha.get("broker_id") if isinstance(ha.get("broker_id"), str) else None
    members = []
    for record in ha.get("members") or []:
        member_id = str(record.get("id") or "")
        url = str(record.get("url") or "")
        index = next((i for i, found in sorted(listed.items()) if found == member_id), None)
        where: int | Address | None = index
        if where is None:
            where = _conventional(s, url, member_id)
        members.append(Member(url, str(record.get("state") or "?"), member_id, where))
    return members


def _conventional(s: CliSettings, url: str, member_id: str) -> Address | None:
    """The member's AMQP host on the first ``-b`` port, if the broker there is that member."""
    try:
        host = parse_address(url).host
    except ValueError:
        return None
    candidate = Address(host=host, port=s.broker.addresses[0].port)
    if candidate in s.broker.addresses:
        return None  # asked already: another broker
    probe = CliSettings(broker=_with_address(s, candidate), timeout=s.timeout, env=s.env)
    try:
        return candidate if _broker_id(probe, 0) == member_id else None
    except ManagementError:
        return None


def _with_address(s: CliSettings, address: Address) -> BrokerUrl:
    return replace(s.broker, addresses=(address,))


def _call(s: CliSettings, member: Member, path: str, body: dict[str, Any] | None = None) -> Any:
    if isinstance(member.mgmt, int):
        return s.at(member.mgmt, path, body)
    if isinstance(member.mgmt, Address):
        probe = CliSettings(broker=_with_address(s, member.mgmt), timeout=s.timeout, env=s.env)
        return probe.call(path, body)
    raise CommandError(_unknown(member), ExitStatus.ERROR)


def _id_text(member: Member) -> str:
    """The member's broker id, or ``stand-alone`` for a broker outside a cluster (id "")."""
    return member.broker_id or "stand-alone"


def _unknown(member: Member) -> str:
    return (
        f"{member.url} ({_id_text(member)}): management address unknown; give every member's"
        " management address in -b, comma separated"
    )


def _mgmt_text(s: CliSettings, member: Member) -> str:
    if isinstance(member.mgmt, int):
        return str(s.broker.addresses[member.mgmt])
    return str(member.mgmt) if member.mgmt is not None else "?"


COLUMNS = ("ID", "PEER", "USER", "STATE", "CHANNELS", "CLIENT")


def _row(c: dict[str, Any]) -> list[str]:
    client = " ".join(str(p) for p in (c.get("client_product"), c.get("client_version")) if p)
    return [
        str(c.get("id")),
        str(c.get("peer")),
        str(c.get("user") or "-"),
        str(c.get("state")),
        str(c.get("channels")),
        client or "-",
    ]


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


@app.command(**command_settings())
def connections(
    ctx: typer.Context,
    show_all: Annotated[
        bool,
        typer.Option("--all", help="every member's connections, not only the -b broker's"),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print as JSON")] = False,
) -> None:
    """List the broker's AMQP connections (with --all, every cluster member's).

    The ID is what disconnect takes (per broker). A backup admits no clients (admin tools
    at most); the primary's list holds each backup's replication link ("qpidd HA backup
    link"). With --all a last line counts each member's connections.
    """
    s = settings(ctx)
    if not show_all:
        if len(s.broker.addresses) != 1:
            raise CommandError("-b lists several brokers: add --all", ExitStatus.USAGE)
        found = list(s.call("/api/connections"))
        if as_json:
            s.env.out(json.dumps(found, indent=2, sort_keys=True))
        else:
            for line in _table([_row(c) for c in found], list(COLUMNS)):
                s.env.out(line)
        return
    members = _members(s)
    listed: list[dict[str, Any]] = []
    counts: list[str] = []
    missing = [m for m in members if m.mgmt is None]
    for member in members:
        if member.mgmt is None:
            counts.append(f"{member.url} ({member.state}): management address unknown")
            continue
        found = list(_call(s, member, "/api/connections"))
        counts.append(f"{member.url} ({member.state}) at {_mgmt_text(s, member)}: {len(found)}")
        listed += [{"member": member.url, "member_state": member.state, **c} for c in found]
    if as_json:
        s.env.out(json.dumps(listed, indent=2, sort_keys=True))
    else:
        rows = [[str(c["member"]), *_row(c)] for c in listed]
        for line in _table(rows, ["MEMBER", *COLUMNS]):
            s.env.out(line)
        s.env.out("connections by member: " + "; ".join(counts))
    if missing:
        raise CommandError("; ".join(_unknown(m) for m in missing), ExitStatus.ERROR)


@app.command(**command_settings())
def disconnect(
    ctx: typer.Context,
    connection_id: Annotated[
        str, typer.Argument(metavar="ID", help="connection id, as connections lists it")
    ],
) -> None:
    """Close one AMQP connection of the broker (320 CONNECTION_FORCED).

    A client reconnects through its URL list, as after a fail-over.
    """
    if not connection_id.isdigit() or int(connection_id) < 1:
        raise CommandError(
            f"ID: a connection id is a positive integer, not {connection_id!r}", ExitStatus.USAGE
        )
    s = settings(ctx)
    closed = s.call(f"/api/connections/{int(connection_id)}", method="DELETE")
    s.env.out(f"closed connection {closed.get('id')} ({closed.get('peer')}, {closed.get('user')})")


@app.command("stop-member", **command_settings())
def stop_member(
    ctx: typer.Context,
    member: Annotated[
        str,
        typer.Argument(
            metavar="MEMBER", help="the member's address or broker id, as status --all lists it"
        ),
    ],
) -> None:
    """Stop one cluster member's broker, as systemctl stop does, and wait until it is down.

    The member is found through the -b broker's membership; its management address is the
    -b address whose broker has its id (give several, comma separated), else its host on
    -b's port. Stopping the primary makes the cluster manager fail over.
    """
    s = settings(ctx)
    members = _members(s)
    chosen = next((m for m in members if member in (m.url, m.broker_id)), None)
    if chosen is None:
        names = ", ".join(f"{m.url} ({_id_text(m)})" for m in members) or "none"
        raise CommandError(f"no member {member} in the cluster (members: {names})")
    if chosen.mgmt is None:
        raise CommandError(_unknown(chosen))
    body = {"broker_id": chosen.broker_id} if chosen.broker_id else {}
    _call(s, chosen, "/api/admin/stop", body)
    s.env.out(f"stopping {chosen.url} ({chosen.state}, {_id_text(chosen)})")
    wait_stopped(s, chosen)
    s.env.out(f"stopped {chosen.url}")


def wait_stopped(s: CliSettings, member: Member) -> None:
    """Poll until ``member``'s management port no longer answers (within ``--timeout``).
    :raises CommandError: it still answers."""

    def down() -> bool:
        try:
            _call(s, member, "/api/status")
        except ManagementError as exc:
            return exc.unreachable
        return False

    try:
        poll_until(down, s.timeout, "the member to stop", interval=0.05)
    except PollTimeout:
        raise CommandError(
            f"{member.url} still answers at {_mgmt_text(s, member)} after {s.timeout:g} s"
        ) from None
