"""Every module logs under its own module name, so a line's `logger` says where to look.

Two names stand apart on purpose: the per-request streams a log pipeline routes or samples on
their own (docs/guides/operate.md). Read from the sources (AST), so a new module that names its
logger by hand fails here rather than in an SRE's filter.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "core",
    "gateway",
    "operator",
    "replica-image",
    "cli",
    "standalone",
    "sim",
    "loadtest",
    "demo",
)
STREAMS = {"lorafleet.gateway.requests", "lorafleet.agent.requests"}
PROCESS = {"lorafleet"}  # the uncaught-exception hook's, not a module's


def _named_loggers() -> dict[str, str]:
    """`file:line` -> the string literal given to `logging.getLogger`."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                func, arg = node.func, node.args[0]
                if (
                    isinstance(func, ast.Attribute)
                    and func.attr == "getLogger"
                    and isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                ):
                    found[f"{path.relative_to(ROOT)}:{node.lineno}"] = arg.value
    return found


def test_modules_log_under_their_module_name_apart_from_the_request_streams():
    named = _named_loggers()
    assert set(named.values()) >= STREAMS  # the check reads the sources it means to
    by_hand = {w: n for w, n in named.items() if n.startswith("lorafleet")}
    assert not {w: n for w, n in by_hand.items() if n not in STREAMS | PROCESS}
