#!/usr/bin/env python3
"""Install the npm packages a lock file pins, without npm: what ``npm ci`` does for a lock
file of plain packages (no install scripts, no native builds), for ``make test``.

    python deploy/node_lock_install.py DIR

``DIR`` holds ``package-lock.json`` (lockfileVersion 2 or 3). Each ``node_modules/...``
entry is fetched from its ``resolved`` URL, or from the registry's standard tarball URL
(``$npm_config_registry``, else https://registry.npmjs.org), checked against the lock's
``integrity`` (sha512 or sha1, Subresource Integrity form) and unpacked into
``DIR/node_modules/<name>``; then ``DIR/node_modules/.installed`` is written.

Why not npm: Debian's ``npm`` package brings about 340 other packages (its ``node-*``
libraries) to a bare Debian 12, for the four plain packages (amqplib; rhea, with debug and
ms) that ``tests/compat/node`` pins. Node.js itself (``nodejs``) is all the test runs.

Errors (one line on stderr, exit 1): a package with an install script (npm would run it:
use npm), a missing ``integrity``, a download that fails, a digest that does not match, an
archive member outside its package directory. Bad use: exit 2.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Any

REGISTRY = "https://registry.npmjs.org"


class InstallError(Exception):
    """A package that cannot be installed as pinned; the message names it."""


def tarball_url(name: str, version: str, entry: dict[str, Any], registry: str) -> str:
    """``resolved`` when the lock has it; else the registry's tarball path for the name
    (``@scope/pkg`` -> ``@scope/pkg/-/pkg-1.0.0.tgz``)."""
    resolved = entry.get("resolved")
    if isinstance(resolved, str) and resolved:
        return resolved
    base = name.rsplit("/", 1)[-1]
    return f"{registry.rstrip('/')}/{name}/-/{base}-{version}.tgz"


def check_integrity(name: str, data: bytes, integrity: str) -> None:
    """Raise unless one of the lock's ``algo-base64`` digests matches ``data``."""
    for item in integrity.split():
        algo, _, expected = item.partition("-")
        if algo in ("sha512", "sha384", "sha256", "sha1"):
            digest = base64.b64encode(hashlib.new(algo, data).digest()).decode()
            if digest == expected:
                return
    raise InstallError(f"{name}: the download does not match the lock's integrity {integrity}")


def unpack(name: str, data: bytes, target: Path) -> None:
    """Unpack an npm tarball's ``package/`` into ``target`` (files and directories only)."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            parts = PurePosixPath(member.name).parts[1:]  # the top directory: package/
            if not parts:
                continue
            if any(p in ("..", "") for p in parts) or PurePosixPath(member.name).is_absolute():
                raise InstallError(f"{name}: archive member outside the package: {member.name}")
            path = target.joinpath(*parts)
            if member.isdir():
                path.mkdir(parents=True, exist_ok=True)
            elif member.isfile():
                path.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                path.write_bytes(source.read())
                path.chmod(0o755 if member.mode & 0o111 else 0o644)
            # links and devices: npm packages do not ship them; left out


def install(directory: Path, registry: str = REGISTRY) -> list[str]:
    """Install every package of ``directory``'s lock file; the ``name@version`` installed."""
    lock = json.loads((directory / "package-lock.json").read_text())
    if lock.get("lockfileVersion") not in (2, 3):
        raise InstallError(f"lockfileVersion {lock.get('lockfileVersion')!r}: expected 2 or 3")
    done = []
    for key, entry in sorted(lock.get("packages", {}).items()):
        if not key.startswith("node_modules/"):
            continue
        name = key.rsplit("node_modules/", 1)[-1]
        version = str(entry.get("version", ""))
        if entry.get("hasInstallScript"):
            raise InstallError(f"{name}@{version} has an install script: install it with npm")
        integrity = entry.get("integrity")
        if not isinstance(integrity, str):
            raise InstallError(f"{name}@{version}: no integrity in the lock file")
        url = tarball_url(name, version, entry, registry)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as exc:
            raise InstallError(f"{name}@{version}: cannot download {url}: {exc}") from exc
        check_integrity(name, data, integrity)
        unpack(name, data, directory / key)
        done.append(f"{name}@{version}")
    (directory / "node_modules").mkdir(exist_ok=True)
    (directory / "node_modules" / ".installed").write_text("\n".join(done) + "\n")
    return done


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "package-lock.json").is_file():
        print("usage: node_lock_install.py DIR (DIR holds package-lock.json)", file=sys.stderr)
        return 2
    try:
        registry = os.environ.get("npm_config_registry")  # noqa: SIM112 (npm's own spelling)
        done = install(Path(argv[0]), registry or REGISTRY)
    except (InstallError, ValueError, tarfile.TarError) as exc:
        print(f"node_lock_install: {exc}", file=sys.stderr)
        return 1
    print(f"installed from {argv[0]}/package-lock.json: {', '.join(done) or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
