"""The packages' arrows (docs/ha-design.md, "Packages and their arrows"), read from the code.

Every ``import`` of the product's own modules is collected with :mod:`ast` (imports under
``if TYPE_CHECKING:`` count for the package rules, not for cycles: they never run). The
rules: ``common`` imports nothing of ours; ``broker.core`` nothing above it; ``broker.amqp``
never ``broker.ha``; ``broker.security`` (decisions the protocols ask for) no protocol and
no HA; the broker never the agent, the CLI or analytics; the agent never the
CLI, nor the broker's insides (only ``broker.management``'s client and probe); and
no module imports itself back through a chain at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "broker", "ha_agent", "qpid_ha_cli", "analytics")

#: importer prefix -> prefixes it must never import.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "common": ("broker", "ha_agent", "qpid_ha_cli", "analytics"),
    "broker.core": ("broker.amqp", "broker.ha", "broker.management", "broker.server"),
    "broker.amqp": ("broker.ha", "broker.management", "broker.server"),
    "broker.security": ("broker.amqp", "broker.ha", "broker.management", "broker.server"),
    "broker": ("ha_agent", "qpid_ha_cli", "analytics"),
    # The agent speaks to its broker only over HTTP and AMQP probes (broker.management).
    "ha_agent": (
        "qpid_ha_cli",
        "analytics",
        "broker.ha",
        "broker.amqp",
        "broker.core",
        "broker.store",
        "broker.security",
        "broker.server",
    ),
    "analytics": ("broker.amqp", "broker.ha", "ha_agent", "qpid_ha_cli"),
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


GRAPH = {name: imports(path, name, modules()) for name, path in modules().items()}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("importer", sorted(FORBIDDEN))
def test_no_arrow_back_up(importer: str) -> None:
    wrong = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if _under(name, importer)
        for target, _ in targets
        for banned in FORBIDDEN[importer]
        if _under(target, banned) and not _under(target, importer)
    )
    assert wrong == []


def test_no_import_cycle() -> None:
    runtime = {
        name: {t for t, rt in targets if rt and t in GRAPH and t != name}
        for name, targets in GRAPH.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 visiting, 2 done
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(runtime[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(runtime):
        if name not in state:
            walk(name)
    assert cycles == []


def test_the_graph_is_read() -> None:
    assert ("broker.ha.role_events", True) in GRAPH["broker.ha.role"]
    assert len(GRAPH) > 100
