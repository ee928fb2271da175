"""One version for the package: the three programs print it with the formats they speak.

The real commands of the venv, as an operator checking every node runs the same release
types them (docs/deploy.md, "Upgrading a cluster"); pyproject.toml's version is read from
common/version.py, so the installed metadata says the same.
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from common.version import REPLICATION_FORMATS, STORE_FORMATS, ZOOKEEPER_FORMATS, __version__


@pytest.mark.parametrize("program", ["qpidd", "qpid-ha-agent", "qpid-ha"])
def test_version_names_the_program_release_and_formats(program: str) -> None:
    command = str(Path(sys.executable).with_name(program))
    done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == (
        f"{program} {__version__} (replication {REPLICATION_FORMATS},"
        f" zookeeper {ZOOKEEPER_FORMATS}, store {STORE_FORMATS})\n"
    )
    assert re.fullmatch(
        r"\S+ \d+\.\d+\.\d+ \(replication formats? [0-9-]+, zookeeper formats? [0-9-]+,"
        r" store formats? [0-9-]+\)\n",
        done.stdout,
    )


def test_the_installed_metadata_has_the_same_version() -> None:
    assert version("qpid-ha-py") == __version__
