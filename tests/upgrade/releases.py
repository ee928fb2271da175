"""The releases of CHANGELOG.md, and a release built from git to run beside the tree.

:func:`releases` reads CHANGELOG.md (``## VERSION`` then ``- commit: `HASH```, ``-
replication formats: LOW-HIGH``, ``- zookeeper formats: LOW-HIGH``); a release whose commit
is not recorded yet (the release commit itself) has ``commit`` None.

:func:`build` makes a release runnable, offline and in about a second: ``git archive`` of its
commit into a directory, a venv of its own (``python -m venv --without-pip``) whose
site-packages hold a ``.pth`` naming that tree first and then the tests' venv's
site-packages (the third-party packages, which a release does not bring), and the console
scripts of the release's own ``pyproject.toml`` (``[project.scripts]``), written as pip
writes them. Not ``pip install``: the tests' venv has no ``wheel`` and an older setuptools
than pyproject.toml's build needs, and fetching them needs the network. The release's C
extensions are not compiled: it runs its pure-Python walker and writer (the same records,
docs/store.md).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

from common.formats import FormatRange, parse_range

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"

_VERSION = re.compile(r"^## (\d+\.\d+\.\d+)\s*$")
_COMMIT = re.compile(r"^- commit: `([0-9a-f]{40})`\s*$")
_FORMATS = re.compile(r"^- (replication|zookeeper) formats: (\S+)\s*$")


@dataclass(frozen=True)
class Release:
    version: str
    commit: str | None
    replication: FormatRange
    zookeeper: FormatRange


def releases(text: str) -> list[Release]:
    """Every release of a changelog's text, newest (first listed) first; ValueError naming
    a release that lacks its formats."""
    found: list[Release] = []
    version: str | None = None
    fields: dict[str, str] = {}

    def close() -> None:
        if version is None:
            return
        if "replication" not in fields or "zookeeper" not in fields:
            raise ValueError(f"CHANGELOG.md: release {version} does not list both formats")
        found.append(
            Release(
                version,
                fields.get("commit"),
                parse_range(fields["replication"]),
                parse_range(fields["zookeeper"]),
            )
        )

    for line in text.splitlines():
        if match := _VERSION.match(line):
            close()
            version, fields = match[1], {}
        elif version is not None and (match := _COMMIT.match(line)):
            fields["commit"] = match[1]
        elif version is not None and (match := _FORMATS.match(line)):
            fields[match[1]] = match[2]
    close()
    return found


def previous_release() -> Release:
    """The newest release of CHANGELOG.md whose commit is recorded."""
    for release in releases(CHANGELOG.read_text()):
        if release.commit is not None:
            return release
    raise AssertionError("CHANGELOG.md lists no release with its commit")


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def has_commit(commit: str) -> bool:
    return git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def build(release: Release, into: Path) -> Path:
    """The release, runnable: returns its venv's ``bin`` directory (``qpidd``,
    ``qpid-ha-agent``, ``qpid-ha``...)."""
    assert release.commit is not None
    if not has_commit(release.commit):
        raise AssertionError(
            f"release {release.version}'s commit {release.commit} (CHANGELOG.md) is not in"
            " this clone's history: a shallow clone, or a history rewritten after the release"
            " (record the commit that now holds it)"
        )
    tree = into / f"qpid-ha-py-{release.version}"
    tree.mkdir(parents=True)
    archive = git("archive", "--format=tar", release.commit)
    assert archive.returncode == 0, archive.stderr.decode()
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=60)
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(site, "qpid-ha-release.pth").write_text("\n".join([str(tree), *sorted(ours)]) + "\n")
    scripts = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        script = venv / "bin" / name
        # the release's tree first, before $PYTHONPATH too (a run with PYTHONPATH naming a
        # work tree would otherwise run this tree's code as the release)
        script.write_text(
            f"#!{python}\nimport sys\nsys.path.insert(0, {str(tree)!r})\n"
            f"from {module} import {function}\nsys.exit({function}())\n"
        )
        os.chmod(script, 0o755)
    return venv / "bin"
