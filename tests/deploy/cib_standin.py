"""A recording stand-in for Pacemaker's ``crm_attribute`` and ``crm_master``.

The OCF tests run the agent for real but Pacemaker's daemons are not running in the test
machine, so the real tools have no CIB to talk to (``crm_attribute`` exits 102,
CRM_EX_DISCONNECT). The tests put wrappers named ``crm_attribute`` and ``crm_master``
first on the agent's PATH (and in ``HA_SBIN_DIR``, where ``ocf_promotion_score`` looks),
each running ``python cib_standin.py TOOL ARGS...``. This script:

- accepts only the command lines the agent (and ``ocf_promotion_score``) use, and exits 64
  with a message naming anything else, recorded as ``"bad": true``;
- keeps the cluster property in ``DIR/attribute`` (absent: exit 105, CRM_EX_NOSUCH, as
  Pacemaker does) and each node's promotion score in ``DIR/score-NODE``, so the next call
  reads what the last one wrote (``DIR`` is ``$QPIDD_TEST_CIB``, ``NODE`` is
  ``$QPIDD_TEST_NODE``);
- fails ``--update`` (exit 1, nothing stored) while ``DIR/fail-update`` exists;
- appends one JSON line per call to ``DIR/calls.jsonl``: tool, args, exit code.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

CRM_EX_USAGE, CRM_EX_NOSUCH = 64, 105


def crm_attribute(state: Path, node: str, args: list[str]) -> tuple[int, str]:
    """(exit code, stdout) of one ``crm_attribute`` call."""
    attribute = state / "attribute"
    match args:
        case ["--type", "crm_config", "--set-name", "qpidd-ha", "--name", name, *rest] if (
            name.startswith("qpidd-in-sync-")
        ):
            match rest:
                case ["--query", "--quiet"]:
                    if not attribute.exists():
                        return CRM_EX_NOSUCH, ""
                    return 0, attribute.read_text() + "\n"
                case ["--update", value]:
                    if (state / "fail-update").exists():
                        return 1, ""
                    attribute.write_text(value)
                    return 0, ""
        case ["-p", "-v", score]:
            (state / f"score-{node}").write_text(score)
            return 0, ""
        case ["-p", "-D"]:
            (state / f"score-{node}").unlink(missing_ok=True)
            return 0, ""
    return CRM_EX_USAGE, ""


def crm_master(state: Path, node: str, args: list[str]) -> tuple[int, str]:
    """(exit code, stdout) of one ``crm_master`` call: only ``-l reboot -v N`` and ``-D``."""
    match args:
        case ["-l", "reboot", "-v", score]:
            (state / f"score-{node}").write_text(score)
            return 0, ""
        case ["-l", "reboot", "-D"]:
            (state / f"score-{node}").unlink(missing_ok=True)
            return 0, ""
    return CRM_EX_USAGE, ""


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    state = Path(os.environ["QPIDD_TEST_CIB"])
    node = os.environ.get("QPIDD_TEST_NODE", "node")
    run = crm_attribute if tool == "crm_attribute" else crm_master
    code, out = run(state, node, args)
    with (state / "calls.jsonl").open("a") as calls:
        entry = {"tool": tool, "node": node, "args": args, "rc": code}
        if code == CRM_EX_USAGE:
            entry["bad"] = True
        calls.write(json.dumps(entry) + "\n")
    if code == CRM_EX_USAGE:
        print(f"{tool} (test stand-in): unexpected command line {args!r}", file=sys.stderr)
    sys.stdout.write(out)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
