"""Command lines and environments of standalone processes (the seam to each component)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.api.models import ReplicaPoolSpec
from lorafleet_core.storage.manifests import load_folder
from lorafleet_gateway.settings import GatewaySettings
from lorafleet_standalone import processes
from lorafleet_standalone.planning import plan
from lorafleet_standalone.processes import ReplicaPlan, data_token_of

POOL = ReplicaPoolSpec.model_validate(
    {
        "baseModel": {"name": "b", "hash": "sha256:" + "a" * 64, "uri": "file:///m"},
        "engine": {"gpuSlots": 3, "hostRamSlots": 2, "maxRank": 8, "extraArgs": ["--seed", "1"]},
    }
)
REPLICA = ReplicaPlan("p-0", 7000, 7001, 7002, Path("/state/replicas/p-0"))


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_vllm_cpu_build_gets_cpu_settings(tmp_path: Path) -> None:
    spec = processes.vllm_process(REPLICA, Path("/m"), POOL, cpu=True, log_dir=tmp_path)
    argv = list(spec.argv)
    assert _arg(argv, "--port") == "7000"
    assert _arg(argv, "--max-loras") == "3"
    # vLLM refuses a host cache smaller than the GPU slots.
    assert _arg(argv, "--max-cpu-loras") == "3"
    assert _arg(argv, "--max-lora-rank") == "8"
    assert _arg(argv, "--dtype") == "float32"
    assert _arg(argv, "--max-model-len") == "256"
    assert argv[-2:] == ["--seed", "1"]
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert spec.health_url == "http://127.0.0.1:7000/health"


def test_vllm_gpu_build_keeps_engine_defaults(tmp_path: Path) -> None:
    argv = list(processes.vllm_process(REPLICA, Path("/m"), POOL, cpu=False, log_dir=tmp_path).argv)
    assert "--dtype" not in argv
    assert "--gpu-memory-utilization" not in argv
    assert "--max-model-len" not in argv


def test_agent_env_is_understood_by_agent_settings(tmp_path: Path, monkeypatch) -> None:
    spec = processes.agent_process(REPLICA, POOL, Path("/m"), log_dir=tmp_path)
    for k, v in spec.env.items():
        monkeypatch.setenv(k, v)
    s = AgentSettings()
    assert (s.replica_id, s.data_port, s.internal_port) == ("p-0", 7001, 7002)
    assert s.vllm_url == "http://127.0.0.1:7000"
    assert s.owned_adapters_file == REPLICA.annotations_file
    assert s.base_model_hash == POOL.base_model.hash
    assert s.base_model_dir == Path("/m")
    assert (s.max_rank, s.gpu_slots, s.cpu_slots) == (8, 3, 3)
    assert tuple(s.allowed_target_modules) == tuple(POOL.engine.allowed_target_modules)
    assert s.host == "127.0.0.1"


def test_gateway_env_is_understood_by_gateway_settings(tmp_path: Path, monkeypatch) -> None:
    spec = processes.gateway_process(
        manifests_dir=tmp_path / "m",
        replicas_file=tmp_path / "r.json",
        pool_name="p",
        port=7100,
        internal_port=7101,
        log_dir=tmp_path,
    )
    for k, v in spec.env.items():
        monkeypatch.setenv(k, v)
    s = GatewaySettings()
    assert (s.port, s.internal_port, s.catalog, s.pool) == (7100, 7101, "files", "p")
    assert (s.manifests_dir, s.replicas_file) == (tmp_path / "m", tmp_path / "r.json")
    assert spec.health_url == "http://127.0.0.1:7101/readyz"


def test_secrets_reach_only_their_processes_and_never_a_command_line(tmp_path: Path) -> None:
    """vLLM's key goes to that vLLM and its agent; the internal token to agents and gateway."""
    replica = ReplicaPlan("p-0", 7000, 7001, 7002, Path("/s/p-0"), vllm_api_key="vkey-0")
    engine = processes.vllm_process(replica, Path("/m"), POOL, cpu=True, log_dir=tmp_path)
    agent = processes.agent_process(
        replica, POOL, Path("/m"), internal_token="itok", log_dir=tmp_path
    )
    gateway = processes.gateway_process(
        manifests_dir=tmp_path,
        replicas_file=tmp_path / "r.json",
        pool_name="p",
        port=1,
        internal_port=2,
        replica_token="itok",
        log_dir=tmp_path,
    )
    assert engine.env["VLLM_API_KEY"] == "vkey-0"
    assert agent.env["LORAFLEET_AGENT_VLLM_API_KEY"] == "vkey-0"
    assert agent.env["LORAFLEET_AGENT_INTERNAL_TOKEN"] == "itok"
    assert gateway.env["LORAFLEET_GATEWAY_REPLICA_TOKEN"] == "itok"
    # The data-port token: the same on both sides, not the internal one, not the control API's.
    data = agent.env["LORAFLEET_AGENT_DATA_TOKEN"]
    assert data == gateway.env["LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN"] == data_token_of("itok")
    assert data != "itok"
    assert len(data) == 64
    control = processes.control_process(
        manifests_dir=tmp_path, replicas_file=tmp_path / "r.json", port=3,
        token_sha256="0" * 64, replica_token="itok", log_dir=tmp_path,
    )  # fmt: skip
    assert data not in " ".join(control.env.values())
    assert "vkey-0" not in " ".join(gateway.env.values())
    for spec in (engine, agent, gateway):
        assert not any(s in arg for arg in spec.argv for s in ("vkey-0", "itok", data))
    assert "vkey-0" not in repr(replica)


def test_a_folder_whose_pool_would_open_vllm_starts_nothing_and_says_why(tmp_path: Path) -> None:
    body = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "ReplicaPool",
        "metadata": {"name": "local"},
        "spec": {
            "baseModel": {"name": "b", "hash": "sha256:" + "a" * 64, "uri": "file:///m"},
            # vLLM on every interface with a known key, beside the agent
            "engine": {"extraArgs": ["--host=0.0.0.0", "--api-key", "known"]},
        },
    }
    (tmp_path / "replicapool-local.yaml").write_text(yaml.safe_dump(body))
    first = plan(load_folder(tmp_path), [], datetime.now(UTC))
    assert first.pool is None  # `lorafleet up` stops with this problem before any process
    (problem,) = [p for p in first.problems if p.kind == "ReplicaPool"]
    assert "sets vLLM's --host" in str(problem)
