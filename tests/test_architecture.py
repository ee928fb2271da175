"""The packages' arrows (docs/ha-design.md, "Packages and their arrows"), read from the code.

Every ``import`` of the product's own modules is collected with :mod:`ast` (imports under
``if TYPE_CHECKING:`` and inside functions count too: a type-only arrow is still an
arrow). The rules: ``common`` imports nothing of ours; ``broker.core`` nothing above it;
``broker.amqp`` never ``broker.ha``; ``broker.amqp10`` (AMQP 1.0) neither, nor the 0-9-1
channel; ``broker.security`` (decisions the protocols ask for) no protocol and no HA; the
broker never the agent, the CLI or analytics; the agent never the CLI, nor the broker's
insides (only ``broker.management``'s client and probe); and no module imports itself back
through a chain, file by file, at run time or for types only (a part a big class gives
away takes a small Protocol of what it needs, never an import of its host:
``broker/amqp/stream_sink.py``, ``broker/amqp/ports.py``).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "broker", "ha_agent", "qpid_ha_cli", "analytics")

#: importer prefix -> prefixes it must never import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "common": ("broker", "ha_agent", "qpid_ha_cli", "analytics"),
    "broker.core": (
        "broker.amqp",
        "broker.amqp10",
        "broker.ha",
        "broker.management",
        "broker.server",
    ),
    "broker.amqp": ("broker.ha", "broker.management", "broker.server"),
    # AMQP 1.0 beside 0-9-1: the broker core and the 0-9-1 context and login, never the
    # 0-9-1 channel (docs/amqp-1-0.md), HA, management or the server.
    "broker.amqp10": (
        "broker.amqp.channel",
        "broker.amqp.channel_consume",
        "broker.amqp.channel_publish",
        "broker.ha",
        "broker.management",
        "broker.server",
    ),
    "broker.security": (
        "broker.amqp",
        "broker.amqp10",
        "broker.ha",
        "broker.management",
        "broker.server",
    ),
    "broker": ("ha_agent", "qpid_ha_cli", "analytics"),
    # The agent speaks to its broker only over HTTP and AMQP probes (broker.management).
    "ha_agent": (
        "qpid_ha_cli",
        "analytics",
        "broker.ha",
        "broker.amqp",
        "broker.amqp10",
        "broker.core",
        "broker.store",
        "broker.security",
        "broker.server",
    ),
    "analytics": ("broker.amqp", "broker.amqp10", "broker.ha", "ha_agent", "qpid_ha_cli"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            found[module_name(path)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, name: str, known: dict[str, Path]) -> list[tuple[str, bool]]:
    """(imported module of ours, at run time?) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, runtime: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    visit_one(sub, False)
                for sub in child.orelse:
                    visit_one(sub, runtime)
            else:
                visit_one(child, runtime)

    def visit_one(node: ast.AST, runtime: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, runtime) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in known else base, runtime))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # Imports inside functions run late: they cannot form an import-time cycle.
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    visit_one(inner, False)
        else:
            visit(node, runtime)

    visit(tree, True)
    return [(m, rt) for m, rt in found if m.split(".")[0] in PACKAGES]


@cache
def graph() -> dict[str, list[tuple[str, bool]]]:
    """Every module of ours and its imports: read once, by the first test that asks (not at
    collection, which every pytest-xdist worker does; the files listed once, not once a
    module: it took a tenth of the suite's collection in each worker)."""
    known = modules()
    return {name: imports(path, name, known) for name, path in known.items()}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_no_arrow_back_up(importer: str) -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in graph().items()
        if _under(name, importer)
        for target, _ in targets
        for banned in FORBIDDEN[importer]
        if _under(target, banned) and not _under(target, importer)
    )
    assert wrong == []


#: Import circles still there, each the set of its modules, to be cut; none is left (issue
#: 27 cut the last, ``HaBroker`` and its status view). Remove an entry once its circle is gone.
KNOWN_CIRCLES: list[frozenset[str]] = []


def import_circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm),
    and the modules that import themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.add(member)
                if member == node:
                    break
            if len(members) > 1 or node in graph[node]:
                circles.append(frozenset(members))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return circles


def _all_arrows() -> dict[str, set[str]]:
    """Every arrow between two of our modules: at run time, type-only or in a function."""
    arrows = graph()
    return {name: {t for t, _ in targets if t in arrows} for name, targets in arrows.items()}


def test_no_import_cycle() -> None:
    new = [
        sorted(circle) for circle in import_circles(_all_arrows()) if circle not in KNOWN_CIRCLES
    ]
    assert new == []


def test_the_cycle_check_finds_a_type_only_circle(tmp_path: Path) -> None:
    """A part that names its host for types only still makes a circle: the check fails."""
    host, part = tmp_path / "host.py", tmp_path / "part.py"
    host.write_text("from broker.zz.part import Part\n")
    part.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.zz.host import Host\n"
    )
    known = {"broker.zz.host": host, "broker.zz.part": part}
    arrows = {
        name: {t for t, _ in imports(path, name, known) if t in known}
        for name, path in known.items()
    }
    assert import_circles(arrows) == [frozenset(known)]
    assert import_circles({"broker.zz.host": {"broker.zz.part"}, "broker.zz.part": set()}) == []


def test_the_graph_is_read() -> None:
    assert ("broker.ha.role_events", True) in graph()["broker.ha.role"]
    assert len(graph()) > 100
