"""Fixtures of the analytics tests: ONE Spark session (``local[2]``, loopback, quiet) for
the whole test session (its start dominates), and the job runs more than one module reads
(the generated logs; the three hand-made clusters).

The test JVMs compile with the client compiler only (:data:`FAST_JIT`): a test job is a
few hundred tiny stages, where the server compiler's work never pays back (half the CPU
time of the Spark tests, measured: one test job 60 s -> 30 s on a loaded 2-core machine).
Nothing the job computes or prints depends on it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics import generate, job
from tests.analytics import three_clusters

#: HotSpot's client compiler (C1) alone: quick to warm up, little compiling for short runs.
FAST_JIT = "-XX:TieredStopAtLevel=1"


@contextmanager
def fast_jit_driver() -> Iterator[None]:
    """A Spark driver JVM started inside (``spark-submit`` reads ``SPARK_SUBMIT_OPTS``) runs
    with :data:`FAST_JIT`; the variable is as before afterwards (the subprocess tests run
    the job as a user would)."""
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{before or ''} {FAST_JIT}".strip()
    try:
        yield
    finally:
        if before is None:
            del os.environ["SPARK_SUBMIT_OPTS"]
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = before


def spark_group(item: pytest.Item) -> str | None:
    """The pytest-xdist group of a test here: ``spark`` for those that use the session
    (one Spark session a worker, not one a test); none for the rest (the job run as a
    subprocess, test_cluster_mode's standalone cluster among them, or no JVM at all: any
    worker; test_cluster_mode on the ``spark`` worker made that worker's serial time the
    whole run's tail, 230 s of ~560, and it needs no session now)."""
    if "spark" in getattr(item, "fixturenames", ()):
        return "spark"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Spark tests in their groups (:func:`spark_group`).

    Under ``--dist loadgroup`` the group is also written into the node id (``id@spark``),
    the suffix the controller groups by: pytest-xdist 3.8 writes it into ``item._nodeid``,
    which pytest 9 no longer reads (each test went to any worker, each worker then started
    Spark and built the generated run)."""
    from _pytest.nodeid import NodeId

    here = Path(__file__).parent
    grouping = bool(getattr(config.option, "loadgroup", False))
    for item in items:
        if here not in Path(item.path).parents:
            continue
        group = spark_group(item)
        if group is None:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
        if grouping and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    with fast_jit_driver():
        session = job.spark_session("local[2]", "qpid-ha-analytics-tests")
    session.conf.set("spark.sql.codegen.wholeStage", "false")
    # Expressions interpreted, not compiled by Janino (Spark's testing switch): a test job
    # 36 s -> 26 s. The job's own runs (test_cluster_mode's cluster, the subprocess tests)
    # compile them, and test_cluster_mode checks that both give the same tables.
    session.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def generated(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[generate.Params, job.Result]:
    """One generated log set through the whole job, shared by the modules that read it:
    12 clusters, 10 fail-overs each, two configurations, 20,000 lines of connection noise
    written by Spark, one drill with lost messages."""
    logs = tmp_path_factory.mktemp("generated")
    params = generate.generate(
        logs, clusters=12, failovers=10, noise=20_000, seed=7, lost_runs=1, spark=spark
    )
    return params, job.run(spark, [str(logs)], tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="session")
def three_clusters_run(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, job.Result]:
    """The hand-made logs of :mod:`tests.analytics.three_clusters` and their one local run:
    test_transforms.py's golden rows, and the run it records (``three_clusters.RECORDED``)
    whose tables test_cluster_mode.py's standalone cluster must give too."""
    logs = three_clusters.write(tmp_path_factory.mktemp("three-clusters"))
    return logs, job.run(spark, [str(logs)], tmp_path_factory.mktemp("three-clusters-report"))
