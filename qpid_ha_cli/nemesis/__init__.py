"""``qpid-ha drill --nemesis``: the drill under faults, on a local cluster it builds itself.

Each node (broker + agent) runs in a network namespace of its own on one bridge, the
clients in another, ZooKeeper in its own (three servers for the ``zk-*`` nemeses). For each cycle
and nemesis: wait until the cluster is settled, start the drill's publisher (confirms) and
consumer, inject the fault, heal it, wait until settled, drain, check: confirmed but lost
(must be 0), duplicates, time with two brokers serving as primary (must be 0), the
clients' outage. Everything it starts is stopped by PID and its namespaces deleted, also
on errors, Ctrl-C and SIGTERM. Root only.

The modules, from the inside out (each states its contract):

- :mod:`~qpid_ha_cli.nemesis.checks`: pure checks over the drill's results and the JSON
  logs (primary spans, their overlap, the per-cycle result and totals).
- :mod:`~qpid_ha_cli.nemesis.report`: the table and the verdict line (pure).
- :mod:`~qpid_ha_cli.nemesis.topology`: namespaces, the bridge, nft rules.
- :mod:`~qpid_ha_cli.nemesis.processes`: ZooKeeper servers and nodes, by PID.
- :mod:`~qpid_ha_cli.nemesis.cluster`: the whole cluster, settled or not.
- :mod:`~qpid_ha_cli.nemesis.nemeses`: one class per fault, ``inject()``/``heal()``.
- :mod:`~qpid_ha_cli.nemesis.run`: the cycles, the drill's clients, the sampler.
- :mod:`~qpid_ha_cli.nemesis.command`: requirements, options, the report.

Its benchmark is ``bench/nemesis_matrix.py``; its results are in ``docs/reliability.md``.
"""
