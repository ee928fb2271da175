#!/usr/bin/env python3
"""Start a stand-alone qpidd or an HA cluster, print where it is, keep it until stopped.

For comparing two builds of the broker with bench/compare.py (--url-a/--url-b): run this
once per build, each with the build on PYTHONPATH (the venv's ``qpidd`` imports ``broker``
from PYTHONPATH first), then give compare.py the URLs and the backups' PIDs. The brokers
are bench/ha_brokers.py's (each with its own --data-dir, ``--default-queue-limit=0``; a
cluster is promoted at epoch 1 and returns once every backup is ready). Prints one JSON
line (url, pid, backup_pids, root, broker_file: the ``broker`` package this environment
imports) and then waits; SIGTERM or ctrl-C stops every broker by PID and removes their
directories.

    PYTHONPATH=/tmp/wt-old .venv/bin/python bench/hold_brokers.py --backups 1 \\
        --broker-arg=--store-sync=fsync

``--in-sync`` commits the backups as the in-sync set, as the agent would: the member lease
(issue 26) is then in force, on the confirm path.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))  # after PYTHONPATH: a worktree given there wins

from ha_brokers import Brokers  # noqa: E402
from throughput import term_to_exit  # noqa: E402

import broker  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backups", type=int, default=0, help="0: a stand-alone broker")
    ap.add_argument("--name", default="held")
    ap.add_argument(
        "--broker-arg", action="append", default=[], help="one more qpidd option (repeatable)"
    )
    ap.add_argument(
        "--in-sync",
        action="store_true",
        help="commit every backup as the in-sync set (as the agent does): the member lease"
        " of replication format 3 is then in force on builds that have it",
    )
    args = ap.parse_args(argv)
    if args.backups < 0:
        ap.error(f"--backups must be 0 or more, not {args.backups}")
    signal.signal(signal.SIGTERM, term_to_exit)
    try:
        with Brokers(prefix=f"qpidd-held-{args.name}-") as brokers:
            if args.backups == 0:
                members = [brokers.standalone(args.name, args.broker_arg)]
            else:
                members = brokers.cluster(args.name, args.backups, args=args.broker_arg)
                if args.in_sync:
                    ids = [b.ha()["broker_id"] for b in members[1:]]
                    body = {"cluster_manager": True, "epoch": 1, "members": ids}
                    members[0].http("POST", "/api/ha/in-sync", body)
            print(
                json.dumps(
                    {
                        "url": members[0].url,
                        "pid": members[0].pid,
                        "backup_pids": [b.pid for b in members[1:]],
                        "root": str(brokers.root),
                        "broker_file": broker.__file__,
                    }
                ),
                flush=True,
            )
            while all(b.alive() for b in members):
                time.sleep(1)
            print("a broker exited", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
