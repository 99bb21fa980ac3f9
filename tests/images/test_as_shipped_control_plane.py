"""The control-plane image as shipped: its own environment, the chart's processes.

The operator and the gateway run from a clean venv installed by the control-plane Dockerfile's
own `pip install` line (tests/images/as_shipped.py), started with the command, environment,
volumes and Secrets the rendered chart gives their Deployments, against the kmock API emulator
(no cluster here). A fine-tuning pipeline registers an adapter over the control API, deploys an
alias, and a tenant reads it back through the gateway's /v1/models and an answer; then it
deploys a second version and rolls back, and the gateway follows each move through its watch.

Where this differs from a cluster: credentials come from a kubeconfig naming the emulator (a pod
uses its ServiceAccount; `load_configuration` tries that first and falls back to the
kubeconfig), the pods' ports are mapped to free local ports (the replica's data and internal
ports, which the gateway takes from its settings, both to the stand-in's one port), volumes are
local folders, the interpreter is the one running the tests (the image's is Python 3.11 from its
base), and the replica is a stand-in agent (tests/gateway/fake_replica.py), not the replica
image.
"""

from __future__ import annotations

import base64
import hashlib
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from lorafleet_core.api.apikeys import TenantKeys, hash_key
from lorafleet_standalone.local_replicas import free_port
from tests.chart.chart_render import deployment, render
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread
from tests.images.as_shipped import ROOT, Process, install_line, pod_process, shipped_venv
from tests.images.test_dockerfiles import CONTROL
from tests.operator.control_support import registration
from tests.operator.factories import pool_body
from tests.operator.kmock_cluster import Cluster
from tests.operator.kopf_fleet import pod_body
from tests.waiting import eventually

# The first run builds the environment (about a minute with a warm pip cache).
pytestmark = pytest.mark.timeout(600)

NS = "serving"  # chart_render's release namespace
POOL = "default"  # the chart's gateway.pool
ADMIN_TOKEN = "pipeline-admin-token"
TENANT_KEY = "lf-as-shipped-tenant-key"
AGENT_AUDIENCE = "lorafleet-agent"
# From the operator moving the alias's status to the gateway answering from the new version: a
# watch event arrives in well under a second; 20 s is slack for a loaded machine, not a wait.
FOLLOWS_WITHIN_S = 20.0
VALUES = {
    "operator": {"control": {"enabled": True, "tokenSecret": "lf-control-token"}},
}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


SECRETS: dict[str, dict[str, Any]] = {
    f"{POOL}-internal": {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"{POOL}-internal"},
        "data": {"agent-token": b64("agent-shared-token"), "data-token": b64("data-token")},
    },
    "lf-control-token": {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "lf-control-token"},
        "data": {"token-sha256": b64(hashlib.sha256(ADMIN_TOKEN.encode()).hexdigest())},
    },
}


def test_the_install_line_is_read_from_the_dockerfile():
    line = install_line(CONTROL)
    assert line.pip == "/opt/lorafleet/bin/pip"
    assert line.requirement() == ".[operator,gateway,cli,canary]"
    assert line.stage is CONTROL.stages[0]


@pytest.fixture(scope="module")
def venv() -> Path:
    return shipped_venv("control-plane", CONTROL)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(NS)
    for secret in SECRETS.values():
        c.create(c.path("secrets", group="v1"), dict(secret, metadata=dict(secret["metadata"])))
    c.create(
        c.path("secrets", group="v1"),
        TenantKeys(tenant="acme", key_hashes=(hash_key(TENANT_KEY),)).to_secret(),
    )
    yield c
    c.close()


@pytest.fixture(scope="module")
def replica(cluster: Cluster) -> Iterator[tuple[FakeReplica, int]]:
    """The stand-in replica and its one port (data and internal)."""
    fake = FakeReplica(f"{POOL}-0")
    with ServerThread(fake.app()) as server:
        pool = pool_body(POOL)
        del pool["metadata"]["namespace"]
        cluster.create(cluster.path("replicapools"), pool)
        cluster.create(
            cluster.path("pods", group="v1"), pod_body(f"{POOL}-0", POOL, server.ports[0])
        )
        yield fake, server.ports[0]


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kmock", "cluster": {"server": url}}],
                "users": [{"name": "sa", "user": {"token": "emulator-accepts-any"}}],
                "contexts": [
                    {
                        "name": "kmock",
                        "context": {"cluster": "kmock", "user": "sa", "namespace": NS},
                    }
                ],
                "current-context": "kmock",
            }
        )
    )
    return path


def _start(proc: Process, log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            proc.argv, env=proc.env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT
        )


def _stop(p: subprocess.Popen[bytes]) -> int:
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return p.returncode


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The processes' homes and their logs (`<part>.log`)."""
    return tmp_path_factory.mktemp("as-shipped")


@pytest.fixture(scope="module")
def control_plane(
    venv: Path, cluster: Cluster, replica: tuple[FakeReplica, int], work: Path
) -> Iterator[dict[str, Process]]:
    docs = render(VALUES)
    image_env = CONTROL.final.env()
    image_env["PATH"] = image_env["PATH"].replace("$PATH", "/usr/local/bin:/usr/bin:/bin")
    kubeconfig = _kubeconfig(work / "kubeconfig", cluster.url)
    procs: dict[str, Process] = {}
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for part in ("operator", "gateway"):
            pod = deployment(docs, part)["spec"]["template"]["spec"]
            home = work / part
            home.mkdir()
            proc = pod_process(
                pod,
                part,
                venv=venv,
                image_env=image_env,
                image_prefix="/opt/lorafleet",
                secrets=SECRETS,
                tokens={AGENT_AUDIENCE: f"{part}-sa-token"},
                workdir=home,
                free_port=free_port,
            )
            proc.env["KUBECONFIG"] = str(kubeconfig)
            if part == "gateway":  # the replica pod's ports, mapped to the stand-in's port
                proc.env["LORAFLEET_GATEWAY_REPLICA_DATA_PORT"] = str(replica[1])
                proc.env["LORAFLEET_GATEWAY_REPLICA_INTERNAL_PORT"] = str(replica[1])
            procs[part] = proc
            running[part] = _start(proc, work / f"{part}.log", home)
        yield procs
    finally:
        codes = {part: _stop(p) for part, p in running.items()}
        for part in running:
            text = (work / f"{part}.log").read_text()
            print(f"--- {part} (exit {codes[part]})\n{text[-6000:]}")


def _url(proc: Process, port: int, path: str) -> str:
    return f"http://127.0.0.1:{proc.ports[port]}{path}"


def test_operator_and_gateway_run_from_the_image_environment(control_plane, venv):
    for part, proc in control_plane.items():
        assert proc.argv[:3] == ["python3", "-m", f"lorafleet_{part}"]
        assert proc.env["PATH"].startswith(f"{venv}/bin:")
        assert ".venv" not in proc.env["PATH"]


def test_pipeline_registers_deploys_and_the_gateway_follows_the_alias(
    control_plane, cluster, replica, work
):
    operator, gateway = control_plane["operator"], control_plane["gateway"]
    control = _url(operator, 8102, "")
    auth = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    eventually(
        lambda: httpx.get(_url(operator, 8080, "/healthz"), timeout=2).status_code == 200,
        within_s=90,
        ignore=(httpx.HTTPError,),
    )

    def register(adapter_id: str) -> None:
        registered = eventually(
            lambda: httpx.post(
                f"{control}/internal/adapters",
                json=registration(adapter_id),
                headers=auth,
                timeout=10,
            ),
            within_s=60,
            ignore=(httpx.HTTPError,),
        )
        assert registered.status_code == 201, registered.text
        eventually(
            lambda: (
                (cluster.get(cluster.path("loraadapters", adapter_id)) or {})
                .get("status", {})
                .get("phase")
                == "Ready"
            ),
            within_s=60,
        )

    def deploy(adapter_id: str) -> None:
        deployed = httpx.put(
            f"{control}/internal/aliases/acme/ship:prod",
            json={"adapter_id": adapter_id},
            headers=auth,
            timeout=10,
        )
        assert deployed.status_code == 200, deployed.text
        eventually(  # the operator's part: the alias serves it once a replica verified it
            lambda: (
                (cluster.get(cluster.path("adapteraliases", "acme-ship-prod")) or {})
                .get("status", {})
                .get("adapter")
                == adapter_id
            ),
            within_s=60,
        )

    register("ship-v1")
    deploy("ship-v1")
    key = {"authorization": f"Bearer {TENANT_KEY}"}

    def listed() -> list[str]:
        resp = httpx.get(_url(gateway, 8080, "/v1/models"), headers=key, timeout=5)
        resp.raise_for_status()
        return [m["id"] for m in resp.json()["data"]]

    eventually(lambda: "acme/ship:prod" in listed(), within_s=60, ignore=(httpx.HTTPError,))
    other = httpx.get(_url(gateway, 8080, "/v1/models"), headers={"authorization": "Bearer x"})
    assert other.status_code == 401

    def served_by() -> str:
        """The adapter that answered (the stand-in replica's reply begins `[replica|adapter]`)."""
        resp = httpx.post(
            _url(gateway, 8080, "/v1/chat/completions"),
            headers=key,
            json={"model": "acme/ship:prod", "messages": [{"role": "user", "content": "hi"}]},
            timeout=10,
        )
        resp.raise_for_status()
        text: str = resp.json()["choices"][0]["message"]["content"]
        return text.removeprefix("[").split("]", 1)[0].split("|", 1)[1]

    def answers_from(version: str, within_s: float) -> None:
        eventually(
            lambda: served_by() == version,
            within_s=within_s,
            what=f"the gateway to answer from {version}",
            ignore=(httpx.HTTPError,),
        )

    answers_from("ship-v1", within_s=60)  # the gateway may not have polled the replica yet
    # A second version, then a rollback: each reaches the gateway through its watch.
    fake, _ = replica
    register("ship-v2")
    fake.registered.add("ship-v2")  # its files verified on the replica, as a pre-warm does
    for version in ("ship-v2", "ship-v1"):
        deploy(version)
        answers_from(version, within_s=FOLLOWS_WITHIN_S)
    assert listed() == ["acme/ship:prod"]
    log = (work / "gateway.log").read_text().splitlines()
    relists = [line for line in log if "re-listing" in line]  # the watches never broke
    assert relists == [], relists[:3]
    # Every HTTP probe the chart declares answers, on the port it names.
    docs = render(VALUES)
    for part, proc in control_plane.items():
        (c,) = deployment(docs, part)["spec"]["template"]["spec"]["containers"]
        named = {p["name"]: p["containerPort"] for p in c["ports"]}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in c:
                get = c[probe]["httpGet"]
                port = named.get(get["port"], get["port"])
                assert httpx.get(_url(proc, port, get["path"]), timeout=5).status_code == 200
    # Both expose their metrics on the ports the chart declares.
    for proc, port in ((operator, 9090), (gateway, 9090)):
        metrics = httpx.get(_url(proc, port, "/metrics"), timeout=5)
        assert metrics.status_code == 200
        assert "lorafleet_" in metrics.text


def test_the_image_environment_validates_manifests_and_carries_no_plotting(venv, tmp_path):
    """The image's default command answers, `lorafleet validate` checks schema and CEL, and
    the image holds neither the simulator's plotting libraries nor an engine (so `lorafleet
    sim` names the extra to install)."""
    bad = tmp_path / "bad.yaml"
    adapter = yaml.safe_load((ROOT / "examples" / "loraadapter-acme-support-v1.yaml").read_text())
    adapter["spec"]["rank"] = 0
    bad.write_text(yaml.safe_dump(adapter))
    env = {"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    cmd = CONTROL.final.exec_form("CMD")
    assert cmd == ["lorafleet", "--help"]
    default = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert default.returncode == 0, default.stderr  # the image's default command
    assert "canary" in default.stdout
    sim = subprocess.run(["lorafleet", "sim"], env=env, capture_output=True, text=True, check=False)
    assert sim.returncode == 2
    assert "lorafleet[sim]" in sim.stderr, sim.stderr
    good = subprocess.run(
        ["lorafleet", "validate", str(ROOT / "examples" / "loraadapter-acme-support-v1.yaml")],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert good.returncode == 0, good.stdout + good.stderr
    refused = subprocess.run(
        ["lorafleet", "validate", str(bad)], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode != 0
    assert "spec.rank" in refused.stdout, refused.stdout + refused.stderr
    absent = subprocess.run(
        ["python3", "-c", _ABSENT],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert absent == ["matplotlib", "numpy", "torch", "vllm"]


_ABSENT = """
import importlib.util
print(" ".join(m for m in ("matplotlib", "numpy", "torch", "vllm")
               if importlib.util.find_spec(m) is None))
"""
