"""The Dockerfiles agree with what the pods run: interpreter, modules, entrypoint, user, paths,
ports. No Docker engine runs here, so nothing is built: these read the files (CI builds them)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from lorafleet_core.planning import pool as pool_plan
from lorafleet_core.planning.replica_pod import REPLICA_UID
from tests.images.dockerfile import Dockerfile, parse
from tests.operator.factories import pool

ROOT = Path(__file__).resolve().parents[2]
REPLICA = parse(ROOT / "replica-image" / "Dockerfile")
CONTROL = parse(ROOT / "Dockerfile")
ENTRYPOINT_SH = (ROOT / "replica-image" / "entrypoint.sh").read_text()
SOURCE_ROOTS: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"][
    "setuptools"
]["packages"]["find"]["where"]


def replica_containers() -> dict[str, dict[str, Any]]:
    sts = pool_plan.plan_pool_objects(pool("p"), "ns", 1).statefulset
    return {c["name"]: c for c in sts["spec"]["template"]["spec"]["containers"]}


def chart_deployments() -> dict[str, dict[str, Any]]:
    import helm_python

    rendered = helm_python.Chart.load(ROOT / "charts" / "lorafleet").render({}, name="lf")
    docs = [d for p, t in rendered.items() if p.endswith(".yaml") for d in yaml.safe_load_all(t)]
    return {d["metadata"]["name"]: d for d in docs if d and d["kind"] == "Deployment"}


def module_file(module: str) -> Path:
    """Where a lorafleet module lives in the source roots the Dockerfiles copy."""
    top, *rest = module.split(".")
    for root in SOURCE_ROOTS:
        package = ROOT / root / top
        if package.is_dir():
            target = package.joinpath(*rest)
            return target / "__main__.py" if target.is_dir() else target.with_suffix(".py")
    raise AssertionError(f"{module} is in no source root")


@pytest.mark.parametrize("dockerfile", [REPLICA, CONTROL], ids=["replica", "control-plane"])
def test_images_are_multi_stage_with_pinned_bases(dockerfile: Dockerfile):
    assert len(dockerfile.stages) >= 2
    for stage in dockerfile.stages:
        tag = stage.base.partition(":")[2]
        assert "@sha256:" in stage.base or re.match(r"^v?\d+\.\d+\.\d+", tag), stage.base
    # The runtime stage copies what it needs from the build stage, not the sources.
    final = dockerfile.final
    assert any("--from=" in c for c in final.all("COPY"))
    assert not any(c.split()[0] in ("core", "cli") for c in final.all("COPY"))


@pytest.mark.parametrize("dockerfile", [REPLICA, CONTROL], ids=["replica", "control-plane"])
def test_images_run_as_the_non_root_user_the_pods_declare(dockerfile: Dockerfile):
    user = dockerfile.final.last("USER")
    assert user == f"{REPLICA_UID}:{REPLICA_UID}"
    created = " ".join(dockerfile.final.all("RUN"))
    assert f"useradd --uid {REPLICA_UID}" in created


def test_replica_pods_run_the_images_interpreter_and_modules():
    containers = replica_containers()
    assert "python3 -m vllm.entrypoints.openai.api_server" in ENTRYPOINT_SH
    assert re.search(r"^\s*python\s", ENTRYPOINT_SH, re.MULTILINE) is None
    for c in containers.values():
        assert c["command"][0] == "python3"
        hooks = [c["lifecycle"]["preStop"]["exec"]["command"]]
        hooks += [p["exec"]["command"] for k, p in c.items() if k.endswith("Probe") and "exec" in p]
        for command in [c["command"], *hooks]:
            assert command[0] == "python3"
            module = command[command.index("-m") + 1]
            if module.startswith("lorafleet_"):
                assert module_file(module).is_file(), module
    assert containers["vllm"]["command"][2] == "vllm.entrypoints.openai.api_server"
    # Both containers run this image, which installs the agent (the wheel built from the
    # source roots) on top of the vLLM base.
    assert {c["image"] for c in containers.values()} == {pool("p").spec.engine.image}
    install = " ".join(REPLICA.final.all("RUN"))
    # The agent, peft for a merged pool's merge Job, which runs in this image too, and the
    # streamer for an s3:// base model.
    assert "lorafleet-*.whl)[agent,merge,streamer]" in install


def test_the_merge_job_and_fetch_of_merged_pools_run_the_replica_images_modules():
    from lorafleet_core.api.models import MergePhase, MergeStatus
    from lorafleet_core.planning.merge_job import plan_merge_job
    from lorafleet_core.wire.records import AdapterRecord

    merged = pool("m", merged={"adapter": "a"})
    record = AdapterRecord(
        id="a",
        tenant="t",
        base_model_hash=merged.spec.base_model.hash,
        rank=8,
        alpha=16,
        target_modules=("q_proj",),
        weights_uri="s3://b/a/",
        checksum="sha256:" + "1" * 64,
    )
    job = plan_merge_job(merged, record, "ns", "s3://b/m")["spec"]["template"]["spec"]
    ready = MergeStatus(
        phase=MergePhase.READY, adapter_id="a", checksum="sha256:" + "2" * 64, uri="s3://b/m/x/"
    )
    sts = pool_plan.plan_pool_objects(merged, "ns", 1, merge=ready).statefulset["spec"]["template"]
    for c in [*job["containers"], *sts["spec"]["initContainers"]]:
        assert c["image"] == merged.spec.engine.image
        assert c["command"][:2] == ["python3", "-m"]
        assert module_file(c["command"][2]).is_file()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(d.startswith("peft") for d in extras["optional-dependencies"]["merge"])


def test_replica_image_paths_and_ports_match_the_statefulset():
    env = REPLICA.final.env()
    assert env["LORAFLEET_AGENT_CACHE_DIR"] == f"{pool_plan.CACHE_DIR}/adapters"
    assert env["LORAFLEET_AGENT_VLLM_URL"] == f"http://127.0.0.1:{pool_plan.VLLM_PORT}"
    assert f"chown -R {REPLICA_UID}:{REPLICA_UID} {pool_plan.CACHE_DIR}" in " ".join(
        REPLICA.final.all("RUN")
    )
    exposed = {int(p) for args in REPLICA.final.all("EXPOSE") for p in args.split()}
    assert exposed == {pool_plan.DATA_PORT, pool_plan.INTERNAL_PORT}
    assert f"--port {pool_plan.VLLM_PORT}" in ENTRYPOINT_SH
    entry = REPLICA.final.exec_form("ENTRYPOINT")
    assert entry is not None
    assert any(c.endswith(entry[0]) and "entrypoint.sh" in c for c in REPLICA.final.all("COPY"))
    # The agent's read-only root: writable paths are volumes the planner mounts.
    agent = replica_containers()["agent"]
    mounts = {m["mountPath"] for m in agent["volumeMounts"]}
    assert {pool_plan.CACHE_DIR, "/tmp"} <= mounts


def test_control_plane_deployments_run_the_images_interpreter_modules_and_user():
    env = CONTROL.final.env()
    assert env["PATH"].startswith("/opt/lorafleet/bin:")
    assert "python3 -m venv /opt/lorafleet" in " ".join(CONTROL.stages[0].all("RUN"))
    assert "'.[operator,gateway,cli,canary]'" in " ".join(CONTROL.stages[0].all("RUN"))
    for name, deployment in chart_deployments().items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == REPLICA_UID, name
        (container,) = pod["containers"]
        command = container["command"]
        assert command[:2] == ["python3", "-m"], name
        assert module_file(command[2]).is_file(), name


def _distribution(requirement: str) -> str:
    name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
    return name.lower().replace("_", "-")


def _control_plane_distributions() -> set[str]:
    """The distributions the control-plane image's own install line names (its extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    install = " ".join(CONTROL.stages[0].all("RUN"))
    extras = re.search(r"'\.\[([\w,]+)\]'", install)
    assert extras is not None, install
    installed = {_distribution(r) for r in project["dependencies"]}
    for extra in extras.group(1).split(","):
        installed |= {_distribution(r) for r in project["optional-dependencies"][extra]}
    return installed


# What `lorafleet canary` (the chart's CronJob, in the control-plane image) imports to run.
_CANARY_IMPORTS = """
import sys
from lorafleet_cli.main import build_parser
build_parser("canary")
import lorafleet_loadtest.probe.canary, lorafleet_loadtest.probe.markers
print(" ".join(sorted({m.split(".")[0] for m in sys.modules})))
"""


def test_control_plane_image_installs_what_the_canary_imports_and_no_plotting():
    """The canary command imports only libraries the image's extras install, and the image
    installs neither matplotlib nor numpy (the simulator's and the load tester's)."""
    import subprocess
    import sys

    installed = _control_plane_distributions()
    assert not {"matplotlib", "numpy"} & installed
    out = subprocess.run(
        [sys.executable, "-c", _CANARY_IMPORTS], capture_output=True, text=True, check=True
    ).stdout.split()
    ours = {"lorafleet_cli", "lorafleet_core", "lorafleet_loadtest", "lorafleet_demo"}
    assert "openai" in out
    assert ours <= set(out)
    assert not {"matplotlib", "numpy", "lorafleet_sim", "torch"} & set(out)


def test_the_replica_image_writes_the_engine_logging_config_vllm_reads(tmp_path: Path):
    """The RUN that writes VLLM_LOGGING_CONFIG_PATH's file, run as the build's shell runs it (the
    variable from the image's ENV): the file is lorafleet's engine logging config."""
    from lorafleet_core import logs

    path = REPLICA.final.env()[logs.ENGINE_LOGGING_ENV]
    assert path.startswith("/etc/")  # written as root at build, read-only to the pod's user
    (step,) = [run for run in REPLICA.final.all("RUN") if "write_engine_logging_config" in run]
    target = tmp_path / "vllm-logging.json"
    # `python3` is the image's interpreter, holding lorafleet: here, the test's.
    path_env = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    env = {**os.environ, "PATH": path_env, logs.ENGINE_LOGGING_ENV: str(target)}
    subprocess.run(["/bin/sh", "-c", step], env=env, check=True, timeout=60)
    assert json.loads(target.read_text()) == logs.engine_logging_config()
