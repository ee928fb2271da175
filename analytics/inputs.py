"""What the job reads, and whether its lines can be trusted: files, schema versions,
malformed lines.

:Status: Beta

Before Spark starts, :func:`list_local` walks the local paths (files and directories, read
recursively) and splits their files into those the ``--glob`` matches and the others, so an
empty directory is one line of error without a JVM, and files left unread (``*.old``, a
``zookeeper.out``) are named in the report. Paths with a scheme (``hdfs://``, ``s3a://``)
are left to Spark.

After the first pass (:func:`analytics.parse.file_stats`, :func:`analytics.parse.malformed`):
:func:`check_versions` stops the job when a file holds events of a schema version this job
does not read (``analytics.parse.SUPPORTED_SCHEMAS``) or none; :func:`line_problems` names,
per file, the truncated and malformed lines and the nodes they may hide events of
(:func:`suspect_nodes`: a fail-over involving one is marked incomplete, never given phases
from the lines that remain).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analytics.parse import SUPPORTED_SCHEMAS

#: Files read in directories: logs, JSON lines, and their rotations (``x.log.1``,
#: ``x.log.2.gz``: Spark decompresses by the extension).
DEFAULT_GLOB = "*.{log,json,jsonl,log.[0-9]*,json.[0-9]*,jsonl.[0-9]*}"
#: Files named in an error or a warning, at most (then "and N more").
NAMED_FILES = 5


class InputError(Exception):
    """Unusable input: one line for the user."""


def has_scheme(path: str) -> bool:
    return "://" in path


def glob_regex(glob: str) -> re.Pattern[str]:
    """Hadoop's glob for one file name (``*``, ``?``, ``[...]`` with ``[^...]`` or
    ``[!...]`` for "not", ``{a,b}``; no ``/``) as a regular expression."""
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end]
                negated = body.startswith(("^", "!"))
                out.append("[" + ("^" + body[1:] if negated else body) + "]")
                i = end
        elif c == "{":
            depth += 1
            out.append("(?:")
        elif c == "}" and depth:
            depth -= 1
            out.append(")")
        elif c == "," and depth:
            out.append("|")
        elif c == "\\" and i + 1 < len(glob):
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _hidden(name: str) -> bool:
    """Spark and Hadoop skip files whose name starts with ``_`` or ``.``."""
    return name.startswith(("_", "."))


@dataclass
class Listing:
    """Local files under the paths: ``read`` (matched), ``unread`` (not matched; hidden
    files, Hadoop's metadata, are left out of both), ``remote`` (paths with a scheme,
    listed by Spark)."""

    read: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    remote: list[str] = field(default_factory=list)


def list_local(paths: Sequence[str], glob: str) -> Listing:
    """Split the files under ``paths`` by ``glob`` (applied to names in directories; a file
    named on the command line is always read). :raises InputError: a path does not exist,
    or no path holds a file to read."""
    if not paths:
        raise InputError("no log paths given")
    pattern = glob_regex(glob)
    listing = Listing()
    for path in paths:
        if has_scheme(path):
            listing.remote.append(path)
            continue
        p = Path(path)
        if not p.exists():
            raise InputError(f"no such file or directory: {path}")
        if p.is_file():
            listing.read.append(str(p))
            continue
        for root, dirs, files in os.walk(p):
            dirs.sort()
            for name in sorted(files):
                full = os.path.join(root, name)
                if _hidden(name):
                    continue  # Hadoop's metadata (_SUCCESS, .crc): never logs
                if pattern.match(name):
                    listing.read.append(full)
                else:
                    listing.unread.append(full)
    if not listing.read and not listing.remote:
        others = f" ({len(listing.unread)} other files)" if listing.unread else ""
        raise InputError(f"no log files in {', '.join(paths)} (files matching {glob}){others}")
    return listing


def named(files: Iterable[str], limit: int = NAMED_FILES) -> str:
    """``a, b, c`` or ``a, b, c and 4 more``."""
    items = sorted(files)
    head = ", ".join(local_name(f) for f in items[:limit])
    return head + (f" and {len(items) - limit} more" if len(items) > limit else "")


def local_name(file: str) -> str:
    """``file:/x/y.log`` (Spark's file path) as ``/x/y.log``; other schemes kept."""
    return file[len("file:") :] if file.startswith("file:") else file


def check_versions(stats: Sequence[dict[str, Any]]) -> None:
    """:raises InputError: some file holds events of a schema version this job does not
    read, or events without a version; the message names the versions and the files."""
    bad: dict[str, list[str]] = {}
    for row in stats:
        for version in row.get("versions") or ():
            if version not in SUPPORTED_SCHEMAS:
                bad.setdefault(version or "none", []).append(str(row["file"]))
    if bad:
        parts = "; ".join(
            f"schema {version}: {named(files)}" for version, files in sorted(bad.items())
        )
        raise InputError(
            f"log events of a schema this job does not read (it reads "
            f"{', '.join(SUPPORTED_SCHEMAS)}; docs/log-schema.md): {parts}"
        )


@dataclass(frozen=True)
class FileProblem:
    """Lines of one file the job could not use: cut short, or not JSON / no ``ts``."""

    file: str
    truncated: int
    malformed: int
    nodes: tuple[str, ...]

    def describe(self) -> str:
        parts = []
        if self.truncated:
            parts.append(f"{self.truncated} truncated")
        if self.malformed:
            parts.append(f"{self.malformed} malformed")
        return f"{local_name(self.file)}: {' and '.join(parts)} line(s)"


def line_problems(
    stats: Sequence[dict[str, Any]], malformed: Sequence[dict[str, Any]]
) -> list[FileProblem]:
    """Per file with truncated or malformed lines (malformed: :func:`analytics.parse.
    malformed`), with the nodes whose events the file holds (their evidence may be
    incomplete)."""
    bad_lines: dict[str, int] = {}
    bad_nodes: dict[str, set[str]] = {}
    for row in malformed:
        file = str(row["file"])
        bad_lines[file] = bad_lines.get(file, 0) + int(row["lines"])
        if row.get("node"):
            bad_nodes.setdefault(file, set()).add(str(row["node"]))
    problems = []
    for row in stats:
        file = str(row["file"])
        truncated = int(row.get("truncated") or 0)
        bad = bad_lines.get(file, 0)
        if truncated or bad:
            nodes = set(row.get("nodes") or ()) | bad_nodes.get(file, set())
            problems.append(FileProblem(file, truncated, bad, tuple(sorted(nodes))))
    return sorted(problems, key=lambda p: p.file)


def suspect_nodes(problems: Iterable[FileProblem]) -> list[str]:
    """Nodes whose events may be missing: those of the files with bad lines."""
    return sorted({node for p in problems for node in p.nodes})
