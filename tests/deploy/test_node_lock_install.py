"""deploy/node_lock_install.py: the lock file's packages installed without npm, each checked
against its integrity; a mismatch, a member outside the package, an install script and bad
use each refused in one line. Tarballs from ``file://`` URLs (the lock's ``resolved``), so
nothing leaves the machine."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "node_lock_install.py"


def tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def sri(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def project(tmp_path: Path, data: bytes, **entry: object) -> Path:
    """A directory with a lock file pinning package ``demo`` at tarball ``data``."""
    archive = tmp_path / "demo-1.0.0.tgz"
    archive.write_bytes(data)
    pinned = {"version": "1.0.0", "resolved": archive.as_uri(), "integrity": sri(data), **entry}
    lock = {
        "name": "t",
        "lockfileVersion": 3,
        "packages": {"": {"name": "t"}, "node_modules/demo": pinned},
    }
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "package-lock.json").write_text(json.dumps(lock))
    return directory


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def test_the_pinned_package_is_unpacked_and_marked_installed(tmp_path: Path) -> None:
    data = tarball({"package/package.json": b'{"name":"demo"}', "package/lib/x.js": b"1;"})
    directory = project(tmp_path, data)
    done = run(str(directory))
    assert done.returncode == 0, done.stderr
    assert "demo@1.0.0" in done.stdout
    assert (directory / "node_modules/demo/lib/x.js").read_bytes() == b"1;"
    assert (directory / "node_modules/.installed").read_text() == "demo@1.0.0\n"


@pytest.mark.parametrize(
    ("files", "entry", "said"),
    [
        ({"package/a.js": b"1"}, {"integrity": sri(b"something else")}, "does not match"),
        ({"package/../../evil.js": b"1"}, {}, "outside the package"),
        ({"package/a.js": b"1"}, {"hasInstallScript": True}, "install script"),
        ({"package/a.js": b"1"}, {"integrity": None}, "no integrity"),
    ],
    ids=["digest-mismatch", "path-traversal", "install-script", "no-integrity"],
)
def test_what_cannot_be_installed_as_pinned_is_one_line_and_exit_1(
    tmp_path: Path, files: dict[str, bytes], entry: dict[str, object], said: str
) -> None:
    data = tarball(files)
    directory = project(tmp_path, data, **entry)
    if entry.get("integrity", "") is None:
        lock = json.loads((directory / "package-lock.json").read_text())
        del lock["packages"]["node_modules/demo"]["integrity"]
        (directory / "package-lock.json").write_text(json.dumps(lock))
    done = run(str(directory))
    assert done.returncode == 1
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "evil.js").exists()
    assert not (directory / "node_modules/.installed").exists()


def test_bad_use_is_exit_2(tmp_path: Path) -> None:
    done = run(str(tmp_path))  # no package-lock.json there
    assert done.returncode == 2 and "usage" in done.stderr
