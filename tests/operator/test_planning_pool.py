from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from pydantic import ValidationError

from lorafleet_core.api import crd_validation
from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.api.names import LABEL_POOL
from lorafleet_core.planning.pool import (
    ANNOTATIONS_FILE,
    clamp_replicas,
    plan_pool_objects,
    selector_string,
)
from tests.operator.factories import pool, pool_body

POOL = pool(
    "gpu-a",
    engine={"gpuSlots": 64, "hostRamSlots": 512, "maxRank": 32, "maxModelLen": 4096},
    replicas={"min": 2, "max": 8},
)


def containers(objs):
    return {c["name"]: c for c in objs.statefulset["spec"]["template"]["spec"]["containers"]}


def flag(args, name):
    return args[args.index(name) + 1]


def test_engine_flags_come_from_the_spec():
    args = containers(plan_pool_objects(POOL, "ns", 3))["vllm"]["args"]
    assert flag(args, "--max-loras") == "64"
    assert flag(args, "--max-cpu-loras") == "512"
    assert flag(args, "--max-lora-rank") == "32"
    assert flag(args, "--max-model-len") == "4096"
    assert flag(args, "--host") == "127.0.0.1"  # only the agent reaches vLLM
    assert "--enable-lora" in args


def test_host_ram_cache_is_never_smaller_than_the_gpu_slots():
    # vLLM refuses --max-cpu-loras < --max-loras; the agent must count the same RAM slots.
    small_ram = pool("p", engine={"gpuSlots": 300, "hostRamSlots": 100})
    objs = containers(plan_pool_objects(small_ram, "ns", 1))
    assert flag(objs["vllm"]["args"], "--max-cpu-loras") == "300"
    env = {e["name"]: e.get("value") for e in objs["agent"]["env"]}
    assert env["LORAFLEET_AGENT_CPU_SLOTS"] == "300"


def test_agent_sees_annotations_through_the_downward_api():
    objs = plan_pool_objects(POOL, "ns", 3)
    spec = objs.statefulset["spec"]["template"]["spec"]
    podinfo = next(v for v in spec["volumes"] if v["name"] == "podinfo")
    items = podinfo["downwardAPI"]["items"]
    assert items == [{"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]
    agent = containers(objs)["agent"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["LORAFLEET_AGENT_OWNED_ADAPTERS_FILE"]["value"] == ANNOTATIONS_FILE
    assert env["LORAFLEET_AGENT_CPU_SLOTS"]["value"] == "512"
    assert env["LORAFLEET_AGENT_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.name"
    )
    assert {p["containerPort"] for p in agent["ports"]} == {8100, 8101}


def test_statefulset_service_pdb_share_the_selector():
    objs = plan_pool_objects(POOL, "ns", 3)
    sts = objs.statefulset
    assert sts["spec"]["replicas"] == 3
    assert sts["spec"]["serviceName"] == "gpu-a"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["selector"]["matchLabels"] == labels
    assert objs.service["spec"]["selector"] == labels
    assert objs.service["spec"]["clusterIP"] == "None"
    assert objs.pdb["spec"]["selector"]["matchLabels"] == labels
    assert labels[LABEL_POOL] == "gpu-a"
    assert selector_string("gpu-a") == ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def test_owner_references_when_the_pool_has_a_uid():
    with_uid = pool("gpu-a")
    with_uid.metadata = with_uid.metadata.model_copy(update={"uid": "1234"})
    refs = plan_pool_objects(with_uid, "ns", 1).statefulset["metadata"]["ownerReferences"]
    assert refs[0]["uid"] == "1234"
    assert refs[0]["controller"] is True


@pytest.mark.parametrize("kind", ["statefulset", "service", "pdb"])
def test_manifests_pass_the_kubernetes_schema(kind):
    obj = getattr(plan_pool_objects(POOL, "ns", 3), kind)
    kubernetes_validate.validate(obj, "1.30", strict=True)


@pytest.mark.parametrize("budget", [0, 3, "0%", "25%", "100%"])
def test_the_disruption_budget_is_a_count_or_a_percentage_as_a_pdb_takes_it(budget):
    """Before: only an integer; a percentage was refused by the model and the CRD."""
    body = pool_body("p", disruptionBudget={"maxUnavailable": budget})
    assert crd_validation.validate(crd_validation.schema_of("ReplicaPool"), body) == []
    pdb = plan_pool_objects(ReplicaPool.model_validate(body), "ns", 3).pdb
    assert pdb["spec"]["maxUnavailable"] == budget
    kubernetes_validate.validate(pdb, "1.30", strict=True)


@pytest.mark.parametrize("budget", [-1, 1001, "101%", "1000%", "25", "25 %", "%", True, 2.5])
def test_a_disruption_budget_neither_count_nor_percentage_is_refused_by_model_and_crd(budget):
    body = pool_body("p", disruptionBudget={"maxUnavailable": budget})
    assert crd_validation.validate(crd_validation.schema_of("ReplicaPool"), body) != []
    with pytest.raises(ValidationError):
        ReplicaPool.model_validate(body)


def test_the_disruption_budget_defaults_to_one_replica_at_a_time():
    assert POOL.spec.disruption_budget.max_unavailable == 1
    assert plan_pool_objects(POOL, "ns", 3).pdb["spec"]["maxUnavailable"] == 1


def test_replicas_are_clamped():
    assert clamp_replicas(POOL, None) == 2
    assert clamp_replicas(POOL, 50) == 8
    assert clamp_replicas(pool(replicas={"min": 1, "max": 5, "desired": 3}), None) == 3


def test_agent_env_is_what_the_agent_settings_read(monkeypatch):
    from lorafleet_agent.settings import AgentSettings

    agent = containers(plan_pool_objects(POOL, "ns", 3))["agent"]
    for e in agent["env"]:
        monkeypatch.setenv(e["name"], e.get("value", "gpu-a-0"))
    s = AgentSettings()
    assert s.owned_adapters_file is not None
    assert str(s.owned_adapters_file) == ANNOTATIONS_FILE
    assert (s.gpu_slots, s.cpu_slots, s.max_rank) == (64, 512, 32)
    assert s.base_model_hash == POOL.spec.base_model.hash
    assert list(s.allowed_target_modules) == POOL.spec.engine.allowed_target_modules
    assert (s.data_port, s.internal_port) == (8100, 8101)
    assert str(s.base_model_dir) == "/models/tiny"


def test_vllm_key_and_agent_token_come_from_the_pools_secret_never_a_literal():
    from lorafleet_core.planning.replica_config import internal_secret_name

    c = containers(plan_pool_objects(POOL, "ns", 3))
    secret = internal_secret_name(POOL.metadata.name)

    def refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {
            e["name"]: (
                e["valueFrom"]["secretKeyRef"]["name"],
                e["valueFrom"]["secretKeyRef"]["key"],
            )
            for e in container["env"]
            if "secretKeyRef" in e.get("valueFrom", {})
        }

    assert refs(c["vllm"]) == {"VLLM_API_KEY": (secret, "vllm-api-key")}
    assert refs(c["agent"]) == {
        "LORAFLEET_AGENT_VLLM_API_KEY": (secret, "vllm-api-key"),
        "LORAFLEET_AGENT_INTERNAL_TOKEN": (secret, "agent-token"),
        "LORAFLEET_AGENT_DATA_TOKEN": (secret, "data-token"),
    }
    assert not any("KEY" in a or "TOKEN" in a for a in c["vllm"]["args"])
