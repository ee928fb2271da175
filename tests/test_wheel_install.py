"""The ``qpid-ha-py`` wheel as a user installs it: built from this tree, installed with pip
into a clean venv, it serves the broker without Spark.

How the clean venv gets its third-party packages without the network: ``make test`` (the
Makefile's ``$(VENV)/wheelhouse`` step, at install time, from the package registry) puts
wheels of the runtime dependencies (pyproject.toml's ``[project] dependencies``, no extra)
and of the build backend (setuptools, wheel) in ``.venv/wheelhouse``. Here the wheel is
built with ``python -m build`` in its own isolated build environment and installed with
``pip install --no-index --find-links WHEELHOUSE``, pip's configuration files ignored: pip
resolves the wheel's declared dependencies itself, from that directory only. A package the
wheel needs but does not declare, or an extra it wrongly pulls in, fails here, which a venv
sharing the dev venv's site-packages would hide; the wheelhouse holds no PySpark, so an
analytics import at start-up would fail too. The venv is checked for what it must not
hold (``pyspark``, ``matplotlib``), and the broker is started from it and used with pika.

Also: the build prints no setuptools deprecation warning (the license metadata is an SPDX
string and ``license-files``, setuptools >= 77), and ``qpid-ha-analytics`` without the
extra says in one line what to install (exit 2).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pika
import pytest

from common.polling import free_port, poll_until

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = Path(sys.prefix) / "wheelhouse"

pytestmark = pytest.mark.timeout(300)


def offline_env(tmp: Path) -> dict[str, str]:
    """The environment without pip's configuration (this machine's points at local
    indexes) and with no index: only the wheelhouse."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(WHEELHOUSE),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_CACHE_DIR=str(tmp / "pip-cache"),
    )
    return env


def copy_tree(target: Path) -> Path:
    """The tree's files (tracked, and new ones not ignored) without .venv or build output:
    the build writes its ``build/`` and ``*.egg-info`` there, not in the work tree."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, listed):
        source = REPO / os.fsdecode(name)
        if source.is_file():
            (target / os.fsdecode(name)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / os.fsdecode(name))
    return target


def run(argv: list[str | Path], env: dict[str, str], cwd: Path, timeout: float = 240):
    return subprocess.run(
        [str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_installs_offline_without_spark_and_serves_the_broker(tmp_path: Path) -> None:
    assert any(WHEELHOUSE.glob("setuptools-*.whl")), (
        f"no wheelhouse in {WHEELHOUSE}: make test prepares it (make .venv/wheelhouse/.done)"
    )
    env = offline_env(tmp_path)
    source = copy_tree(tmp_path / "src")
    dist = tmp_path / "dist"
    built = run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], env, tmp_path)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    output = built.stdout + built.stderr
    assert "deprecat" not in output.lower(), output[-3000:]
    (wheel,) = dist.glob("qpid_ha_py-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(name).decode()
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata
    spark = [line for line in metadata.splitlines() if "pyspark" in line]
    assert spark and all('extra == "analytics"' in line for line in spark), spark

    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", venv], env, tmp_path)
    assert made.returncode == 0, made.stderr
    bin_ = venv / "bin"
    installed = run([bin_ / "python", "-m", "pip", "install", wheel], env, tmp_path)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    assert "deprecat" not in (installed.stdout + installed.stderr).lower()

    probe = run(
        [bin_ / "python", "-c", "import importlib.util as u, broker; print(broker.__file__);"
         " print([m for m in ('pyspark', 'matplotlib') if u.find_spec(m)])"],
        env, tmp_path,
    )  # fmt: skip
    where, extra = probe.stdout.splitlines()
    assert Path(where).is_relative_to(venv), where  # the wheel's copy, not this tree's
    assert extra == "[]"  # neither PySpark nor matplotlib came with the broker

    for program in ("qpidd", "qpid-ha-agent", "qpid-ha"):
        helped = run([bin_ / program, "--help"], env, tmp_path, timeout=60)
        assert helped.returncode == 0, (program, helped.stderr)
        assert "--" in helped.stdout, program
    analytics = run([bin_ / "qpid-ha-analytics", str(tmp_path)], env, tmp_path, timeout=60)
    assert analytics.returncode == 2
    assert analytics.stdout == ""
    (line,) = analytics.stderr.splitlines()
    assert line.startswith("qpid-ha-analytics: error:") and "qpid-ha-py[analytics]" in line

    port, log = free_port(), tmp_path / "qpidd.log"
    broker = subprocess.Popen(
        [bin_ / "qpidd", "--interface=127.0.0.1", f"--port={port}", "--mgmt-port=0",
         f"--log-file={log}"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def started() -> bool:
            if broker.poll() is not None:
                raise AssertionError(f"qpidd exited {broker.returncode}")
            return log.exists() and '"broker_started"' in log.read_text()

        poll_until(started, 30, "the installed qpidd to start")
        connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
        channel = connection.channel()
        channel.queue_declare("installed")
        channel.basic_publish("", "installed", b"from a clean venv")
        method, _props, body = channel.basic_get("installed", auto_ack=True)
        assert method is not None and body == b"from a clean venv"
        connection.close()
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()
    assert broker.returncode == 0
