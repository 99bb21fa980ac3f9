"""Every `LORAFLEET_*` environment variable the docs name is one a component reads, and every
chart value they name (`monitoring.gpuHourlyPrice`, `canary.keySecret.name`, ...) is one the
chart has: a renamed setting otherwise leaves a doc that configures nothing."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic_settings import BaseSettings

from lorafleet_agent.settings import AgentSettings
from lorafleet_gateway.settings import GatewaySettings
from lorafleet_operator.settings import OperatorSettings
from lorafleet_standalone.up_options import StandaloneSettings

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
CHART = ROOT / "charts" / "lorafleet"
ENV_VAR = re.compile(r"\bLORAFLEET_[A-Z0-9_]*[A-Z0-9_*]")


def settings_variables() -> set[str]:
    """The variables the components' settings classes read (prefix + field, or its aliases)."""
    classes: list[type[BaseSettings]] = [
        AgentSettings,
        GatewaySettings,
        OperatorSettings,
        StandaloneSettings,
    ]
    names = set()
    for cls in classes:
        prefix = str(cls.model_config.get("env_prefix", ""))
        for field_name, field in cls.model_fields.items():
            names.add((prefix + field_name).upper())
            alias = field.validation_alias
            for choice in getattr(alias, "choices", [alias] if isinstance(alias, str) else []):
                names.add(str(choice).upper())
    return names


def variables_in_code() -> set[str]:
    """Variables read outside the settings classes (the CLI's key, the entrypoint script, ...)."""
    files = subprocess.run(
        ["git", "ls-files", "--", "*.py", "*.sh", "*.yaml", "*.tpl", "Makefile", "*Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    found: set[str] = set()
    for file in files:
        found |= set(re.findall(r"LORAFLEET_[A-Z0-9_]+", (ROOT / file).read_text()))
    return found


def named(pattern: re.Pattern[str]) -> Iterator[tuple[str, str]]:
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in pattern.finditer(line):
                yield f"{path.relative_to(ROOT)}:{number}", match.group(0)


def known_variable(name: str, known: set[str]) -> bool:
    if name.endswith(("_", "*")):  # a prefix: `LORAFLEET_AGENT_MERGED_*`
        return any(k.startswith(name.rstrip("*")) for k in known)
    return name in known


def test_every_environment_variable_the_docs_name_is_read_by_the_code():
    known = settings_variables() | variables_in_code()
    wrong = [
        f"{where}: {name}" for where, name in named(ENV_VAR) if not known_variable(name, known)
    ]
    assert not wrong, "\n".join(wrong)


def value_paths() -> tuple[set[str], set[str]]:
    """The chart's value paths (values.yaml and its schema), and those below which any key goes
    (free-form objects: a pool spec, resources, labels)."""
    paths: set[str] = set()
    open_paths: set[str] = set()

    def walk_values(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                path = f"{prefix}.{key}" if prefix else key
                paths.add(path)
                walk_values(value, path)

    def walk_schema(node: dict[str, Any], prefix: str) -> None:
        props = node.get("properties")
        if node.get("type") == "object" and (not props or node.get("additionalProperties")):
            open_paths.add(prefix)
        for key, sub in (props or {}).items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            walk_schema(sub, path)

    walk_values(yaml.safe_load((CHART / "values.yaml").read_text()), "")
    walk_schema(json.loads((CHART / "values.schema.json").read_text()), "")
    return paths, open_paths


def test_every_chart_value_the_docs_name_exists():
    paths, open_paths = value_paths()
    tops = sorted({p.split(".")[0] for p in paths})
    # `monitoring.gpuHourlyPrice`, not `gateway.md` or `operator.log` (files the docs link to).
    value = re.compile(rf"(?<![\w./-])(?:{'|'.join(tops)})(?:\.[A-Za-z0-9_]+)+(?![\w/-])")
    wrong = []
    for where, name in named(value):
        if name.rsplit(".", 1)[1] in {"md", "log", "py", "yaml", "json", "txt"}:
            continue
        parents = {name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)}
        if name not in paths and not parents & open_paths:
            wrong.append(f"{where}: {name}")
    assert len(paths) > 50  # the chart has its values: none found means a bug here
    assert not wrong, "\n".join(wrong)


def test_a_renamed_variable_or_value_is_caught():
    known = {"LORAFLEET_AGENT_CACHE_DIR", "LORAFLEET_AGENT_MERGED_CHECKSUM"}
    assert known_variable("LORAFLEET_AGENT_MERGED_*", known)
    assert known_variable("LORAFLEET_AGENT_", known)
    assert not known_variable("LORAFLEET_AGENT_CACHE_PATH", known)
    assert not known_variable("LORAFLEET_GATEWAY_*", known)
    paths, _ = value_paths()
    assert "monitoring.gpuHourlyPrice" in paths
    assert "monitoring.gpuHourPrice" not in paths


# vLLM's own variables (`VLLM_CPU_OMP_THREADS_BIND`, ...), not a lorafleet setting's tail such
# as the agent's `VLLM_URL` (`LORAFLEET_AGENT_VLLM_URL`, listed by suffix in the settings
# reference).
VLLM_VAR = re.compile(r"(?<![A-Z0-9_])VLLM_[A-Z0-9_]*[A-Z0-9]")


def vllm_variables() -> set[str]:
    """The variables the installed vLLM reads (its envs.py, read as text: no import of vLLM)."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None, "vLLM is not installed"
    assert spec.submodule_search_locations, "vLLM is not a package"
    envs = Path(next(iter(spec.submodule_search_locations))) / "envs.py"
    return set(re.findall(r'"(VLLM_[A-Z0-9_]+)"\s*:', envs.read_text()))


def test_every_vllm_variable_the_docs_name_is_one_vllm_reads():
    ours = {v.removeprefix("LORAFLEET_AGENT_") for v in settings_variables()}
    known = vllm_variables() | ours
    assert "VLLM_CPU_OMP_THREADS_BIND" in known  # vLLM's list was found
    assert "VLLM_CPU_OMP_THREAD_BIND" not in known  # and a misspelt one is not in it
    wrong = [f"{where}: {name}" for where, name in named(VLLM_VAR) if name not in known]
    assert not wrong, "\n".join(wrong)
