"""``qpid-ha drill``: a fail-over drill, the spout and drain of seed 000 grown up.

A publisher with confirms and a consumer with acks, both pika, on a fail-over URL list (or
one virtual IP). The publisher sends numbered messages at ``--rate`` for ``--duration``
seconds or until ``--count`` are confirmed; each client reconnects through the URL list
when it loses its connection; then the drill drains until every confirmed message is
received (or ``--drain-timeout``) and ends with a check: sent, confirmed, received, lost
(confirmed but never received), duplicated. It exits 1 if anything confirmed was lost.

The modules, from the inside out (each states its contract):

- :mod:`~qpid_ha_cli.drill.core`: the accounts and gap detection; no I/O, no threads, no
  clock (every call takes ``now``). Returns the :class:`~qpid_ha_cli.drill.core.DrillEvent`
  values to log.
- :mod:`~qpid_ha_cli.drill.settings`: the option strings as checked settings; every bad
  value a one-line usage error.
- :mod:`~qpid_ha_cli.drill.run`: the I/O shell, two pika connections in two threads, the
  clock, the rate, reconnects and logging; it feeds the core under one lock.
- :mod:`~qpid_ha_cli.drill.command`: the typer command and its one-line report.

Events (``docs/log-schema.md``, "Drill events"): ``drill_started``, ``client_connected``,
``client_disconnected``, ``client_reconnected``, ``confirm_gap``, ``client_gave_up``,
``drill_unreachable``, ``drill_finished``.

Exit codes: :class:`common.exit_status.ExitStatus`, the same as every qpid-ha command.
"""
