"""BrokerContext's late parts: made after the context, each registered once through attach
(broker/amqp/context.py), never set field by field from elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.amqp.helpers import make_context

ROOT = Path(__file__).resolve().parents[2]
LATE = {
    "admission",
    "server_properties",
    "streams",
    "barrier",
    "store_barrier",
    "store_transaction",
    "after_read",
    "between_publishes",
    "acl",
    "require_encryption",
}


def test_each_part_is_registered_once() -> None:
    ctx = make_context()
    hand_over = [0]
    ctx.attach(after_read=lambda: hand_over.__setitem__(0, hand_over[0] + 1))
    ctx.attach(server_properties=dict)  # another part: fine
    assert ctx.after_read is not None and ctx.server_properties is dict
    ctx.after_read()
    assert hand_over == [1]
    with pytest.raises(RuntimeError, match="after_read is registered already"):
        ctx.attach(after_read=lambda: None)


def test_the_product_never_sets_a_late_part_field() -> None:
    """Only BrokerContext.attach sets them (the broker's, the store's and the HA role's
    code registers; tests may still build a context by hand)."""
    offenders = []
    for path in sorted((ROOT / "broker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Assign):
                continue
            targets = node.targets
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr in LATE
                    and isinstance(target.value, ast.Attribute | ast.Name)
                    and "context" in ast.unparse(target.value)
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []
