"""``python -m analytics`` / ``qpid-ha-analytics``: the fail-over report from JSON logs.

:Status: Beta

Usage: ``qpid-ha-analytics PATH... [--out DIR] [--master URL] [--scenario S] [--config C]
[--glob G] [--parquet URI] [--quiet]``. ``local[*]`` unless ``--master`` names another
Spark master (``spark://host:7077``, ``yarn``...): the same job runs there unchanged.
Prints where the report is. Bad usage or unusable input: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from analytics import failover, job

PROG = "qpid-ha-analytics"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="log files or directories (read recursively), any Hadoop path",
    )
    p.add_argument(
        "--out",
        default="analytics-report",
        metavar="DIR",
        help="report directory (default: ./analytics-report)",
    )
    p.add_argument("--master", default="local[*]", help="Spark master (default: local[*])")
    p.add_argument("--scenario", help="scenario label (default: the drill's, else unlabelled)")
    p.add_argument("--config", help="configuration label (default: the agents' session timeout)")
    p.add_argument(
        "--glob",
        default=job.DEFAULT_GLOB,
        help=f"file names to read in directories (default: {job.DEFAULT_GLOB})",
    )
    p.add_argument(
        "--parquet", metavar="URI", help="where the Parquet tables go (default: DIR/parquet)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        job.check_paths(args.paths)
        spark = job.spark_session(args.master)
    except job.JobError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    try:
        result = job.run(
            spark,
            args.paths,
            Path(args.out),
            labels=failover.Labels(scenario=args.scenario, config=args.config),
            glob=args.glob,
            parquet=args.parquet,
            progress=job.Progress(None if args.quiet else sys.stderr),
        )
    except job.JobError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    failovers = sum(1 for r in result.tables["failovers"] if r["kind"] == "failover")
    anomalies = len(result.tables["anomalies"])
    print(
        f"{result.lines} lines, {failovers} fail-over(s), {anomalies} anomalies "
        f"in {result.seconds:.1f}s"
    )
    print(f"report: {result.html.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
