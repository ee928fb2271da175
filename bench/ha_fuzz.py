#!/usr/bin/env python3
"""The long run of the HA path's fuzzer (issue 24, item 5): a primary and two backups.

Starts a 3-broker cluster of real ``qpidd`` processes on loopback (``tests/ha/cluster.py``:
``ha-replicate=all``, no agents; broker 0 promoted, brokers 1 and 2 ready backups), then runs
:func:`tests.fuzz.ha_fuzz.run` for --seconds: valid and garbled AMQP sessions and management
requests against the primary, a quiescent check after every batch (every broker up, both
backups' state equal to the primary's, the in-sync set reported truthfully) and a scan of
every broker's stderr and log (tracebacks, ``loop_exception``, ``internal_error``,
``ha_replication_error``). ``make test`` runs the same code for a few seconds
(``tests/fuzz/test_ha_fuzz.py``).

Prints one JSON object: the figures, the machine (CPUs, load before and after) and every
finding. Exit status 1 when anything was found. Reproducible in part with --seed (the
sessions are; their interleaving across --concurrency threads is not).

    .venv/bin/python bench/ha_fuzz.py --seconds 600            # the figures in docs/reliability.md
    .venv/bin/python bench/ha_fuzz.py --seconds 60 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from common.polling import poll_until  # noqa: E402
from tests.fuzz.cluster_check import LINK_HEARTBEAT  # noqa: E402
from tests.fuzz.ha_fuzz import run  # noqa: E402
from tests.ha.cluster import Cluster  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--batch", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the brokers' directories")
    args = parser.parse_args()
    seed = random.randrange(2**31) if args.seed is None else args.seed
    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="ha-fuzz-"))
    cluster = Cluster(root, 3, LINK_HEARTBEAT).start()
    try:
        cluster.promote(0, epoch=1)
        cluster.wait_state(0, "active")
        for i in (1, 2):
            cluster.wait_state(i, "ready", timeout=30)
        poll_until(lambda: sum(b["in_sync"] for b in cluster.ha(0)["backups"]) == 2, 30)
        figures = run(
            cluster, seconds=args.seconds, seed=seed, batch=args.batch, concurrency=args.concurrency
        )
    finally:
        cluster.stop()
    report = {
        **figures.summary(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "directory": str(root) if args.keep or figures.findings else None,
        "finding_lines": figures.findings[:200],
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if not args.keep and not figures.findings:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 1 if figures.findings else 0


if __name__ == "__main__":
    sys.exit(main())
