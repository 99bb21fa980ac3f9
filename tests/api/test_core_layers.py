"""The shared core's layers hold: planning performs no I/O, and core imports no product.

Read from the sources (AST), following lorafleet_core imports transitively, so a planner that
reaches I/O through a helper fails as surely as one that imports httpx itself.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"
PRODUCTS = (
    "lorafleet_operator",
    "lorafleet_gateway",
    "lorafleet_agent",
    "lorafleet_cli",
    "lorafleet_standalone",
    "lorafleet_sim",
    "lorafleet_loadtest",
    "lorafleet_demo",
)
# What pure planning may use besides the standard library: data models, YAML, and the schema and CEL
# evaluators the CRD checks run (computation only).
PURE_THIRD_PARTY = {"pydantic", "yaml", "jsonschema", "openapi_schema_validator", "celpy"}
# Core modules that perform I/O or need a server or cluster library.
IO_MODULES = (
    "lorafleet_core.kube",
    "lorafleet_core.web",
    "lorafleet_core.storage",
    "lorafleet_core.wire.replica_client",
)
# Standard-library modules that reach outside the process.
IO_STDLIB = {"socket", "subprocess", "urllib.request", "http.client", "shutil", "tempfile"}


def module_path(module: str) -> Path | None:
    base = CORE.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def direct_imports(module: str) -> frozenset[str]:
    path = module_path(module)
    if path is None:
        return frozenset()
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from lorafleet_core.x import y` may import the submodule y
            found |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if module_path(f"{node.module}.{a.name}")
            }
    return frozenset(found)


def closure(module: str) -> dict[str, str]:
    """Every module `module` imports, transitively through lorafleet_core: {import: via}."""
    seen: dict[str, str] = {}
    todo = [module]
    while todo:
        current = todo.pop()
        for imported in direct_imports(current):
            if imported in seen:
                continue
            seen[imported] = current
            if imported.startswith("lorafleet_core"):
                todo.append(imported)
    return seen


def core_modules(package: str) -> list[str]:
    root = CORE / "lorafleet_core"
    start = root.joinpath(*package.split(".")[1:])
    files = start.rglob("*.py") if start.is_dir() else [start.with_suffix(".py")]
    return sorted(
        ".".join(("lorafleet_core", *p.relative_to(root).with_suffix("").parts)).removesuffix(
            ".__init__"
        )
        for p in files
    )


def _is_io(name: str) -> bool:
    if name.startswith(IO_MODULES):
        return True
    top = name.split(".")[0]
    if name in IO_STDLIB or top in IO_STDLIB:
        return True
    if top in sys.stdlib_module_names or top == "lorafleet_core":
        return False
    return top not in PURE_THIRD_PARTY


@pytest.mark.parametrize("module", core_modules("lorafleet_core.planning"))
def test_planning_imports_no_io(module: str):
    reached = closure(module)
    bad = {name: via for name, via in reached.items() if _is_io(name)}
    assert not bad, f"{module} reaches I/O (import: via): {bad}"


@pytest.mark.parametrize("module", core_modules("lorafleet_core"))
def test_core_imports_no_product(module: str):
    bad = [m for m in direct_imports(module) if m.split(".")[0] in PRODUCTS]
    assert not bad, f"{module} imports a product: {bad}"


def test_the_layer_check_sees_io_through_a_helper(tmp_path, monkeypatch):
    """The check is transitive: a planner importing a pure-looking helper that imports httpx
    is caught."""
    pkg = tmp_path / "lorafleet_core" / "planning"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (tmp_path / "lorafleet_core" / "__init__.py").write_text("")
    (pkg / "helper.py").write_text("import httpx\n")
    (pkg / "planner.py").write_text("from lorafleet_core.planning import helper\n")
    monkeypatch.setattr(sys.modules[__name__], "CORE", tmp_path)
    direct_imports.cache_clear()
    try:
        reached = closure("lorafleet_core.planning.planner")
        assert reached["httpx"] == "lorafleet_core.planning.helper"
        assert _is_io("httpx")
    finally:
        direct_imports.cache_clear()
