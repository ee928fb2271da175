"""CHANGELOG.md's releases are what the upgrade test builds: each names its commit, which
holds that version and speaks the formats listed; the tree can upgrade from the newest."""

from __future__ import annotations

import re

import pytest

from common.formats import choose
from common.version import REPLICATION_FORMATS, ZOOKEEPER_FORMATS
from tests.upgrade.releases import CHANGELOG, git, has_commit, previous_release, releases


def test_the_changelog_is_read_as_written() -> None:
    text = (
        """# Changelog

## 0.2.0

- commit: (recorded by the next commit)
- replication formats: 1-2
- zookeeper formats: 1-1

## 0.1.0

- commit: `"""
        + "a" * 40
        + """`
- replication formats: 1-1
- zookeeper formats: 1-1
"""
    )
    new, old = releases(text)
    assert (new.version, new.commit, new.replication.text) == ("0.2.0", None, "1-2")
    assert (old.version, old.commit, old.zookeeper.text) == ("0.1.0", "a" * 40, "1-1")
    with pytest.raises(ValueError, match=r"release 0\.3\.0 does not list both formats"):
        releases("## 0.3.0\n- replication formats: 1-1\n")


def test_each_release_s_commit_holds_its_version_and_formats() -> None:
    listed = releases(CHANGELOG.read_text())
    assert listed, "CHANGELOG.md lists no release"
    for release in listed:
        if release.commit is None:
            continue
        assert has_commit(release.commit), f"{release.version}: no commit {release.commit}"
        shown = git("show", f"{release.commit}:common/version.py")
        source = shown.stdout.decode()
        assert f'__version__ = "{release.version}"' in source
        for name, formats in (
            ("REPLICATION_FORMATS", release.replication),
            ("ZOOKEEPER_FORMATS", release.zookeeper),
        ):
            written = re.search(rf"^{name} = FormatRange\((\d+), (\d+)\)$", source, re.M)
            assert written is not None and (int(written[1]), int(written[2])) == (
                formats.lowest,
                formats.highest,
            ), f"{release.version}: {name}"


def test_the_tree_speaks_a_format_of_the_previous_release() -> None:
    """Else a rolling upgrade from it would be refused: a release must keep the lowest
    format of the previous one until the next (docs/ha-design.md, "Format versions")."""
    release = previous_release()
    assert choose(REPLICATION_FORMATS, release.replication) is not None
    assert choose(ZOOKEEPER_FORMATS, release.zookeeper) is not None
