"""``python -m analytics`` / ``qpid-ha-analytics``: the fail-over report from JSON logs.

:Status: Beta

Usage: ``qpid-ha-analytics PATH... [--out DIR] [--master URL] [--scenario S] [--config C]
[--glob G] [--parquet URI] [--quiet] [--strict]``. ``local[*]`` unless ``--master`` names
another Spark master (``spark://host:7077``, ``yarn``...): the same job runs there
unchanged. Prints where the report is, after a warning line for unusable lines and
unread files. Bad usage or unusable input (no log files, an unknown schema version): one
line on stderr, exit 2; ``--strict``: exit 1 when lines could not be used. Installed
without the ``analytics`` extra (no PySpark or matplotlib: ``pip install qpid-ha-py``
alone): one line saying what to install, exit 2.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from analytics import job

PROG = "qpid-ha-analytics"
#: What the job imports that only the ``analytics`` extra installs (pyproject.toml).
EXTRA_MODULES = ("pyspark", "matplotlib")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


DESCRIPTION = "The fail-over report (HTML, plots, CSV and Parquet tables) from JSON logs."
EPILOG = (
    "Exit status: 0 report written; 1 with --strict, report written but lines could not be "
    "used; 2 bad usage or unusable input (no log files, no events, a log schema version "
    "this job does not read). Details: docs/analytics.md."
)


def missing_extra() -> str | None:
    """The one line to print when the ``analytics`` extra is not installed, else None."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return (
        f"{PROG}: error: the fail-over report needs {' and '.join(missing)}: install"
        " qpid-ha-py[analytics] (pip install 'qpid-ha-py[analytics]'; the broker, the agent"
        " and qpid-ha do not need it)"
    )


def parser() -> argparse.ArgumentParser:
    from analytics import job

    p = _Parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG)
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
    p.add_argument(
        "--master",
        default="local[*]",
        help="Spark master (default: local[*]); with spark://HOST:PORT the driver listens on "
        "the address that reaches the master (SPARK_LOCAL_IP overrides) and every worker must "
        "read the PATHs (a shared file system, hdfs://, s3a://)",
    )
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
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines and no Spark start-up output on stderr (warnings stay)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when lines were truncated or malformed (the report is still written)",
    )
    return p  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    missing = missing_extra()
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    from analytics import failover, job

    args = parser().parse_args(argv)
    try:
        listing = job.check_paths(args.paths, args.glob)
        spark = job.spark_session(args.master, quiet=args.quiet)
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
            listing=listing,
        )
    except job.JobError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    finally:
        spark.stop()
    for warning in result.warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    failovers = [r for r in result.tables["failovers"] if r["kind"] == "failover"]
    incomplete = sum(1 for r in failovers if r.get("evidence") != "complete")
    anomalies = len(result.tables["anomalies"])
    print(
        f"{result.lines} lines, {len(failovers)} fail-over(s) ({incomplete} with incomplete "
        f"evidence), {anomalies} anomalies in {result.seconds:.1f}s"
    )
    print(f"report: {result.html.resolve()}")
    return exit_status(result, strict=args.strict)


def exit_status(result: job.Result, *, strict: bool) -> int:
    """0, or 1 with ``strict`` when lines could not be used (the report is written)."""
    return 1 if strict and result.problems else 0


if __name__ == "__main__":
    sys.exit(main())
