"""The replica pods a pool asks for: its spec.template, probes, resources, security, drain."""

from __future__ import annotations

import copy
import os
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.api.crd_validation import validate
from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.planning.merged_lifecycle import merge_patch
from lorafleet_core.planning.pool import plan_pool_objects
from lorafleet_core.planning.replica_config import InsideAuth
from lorafleet_core.planning.replica_pod import REPLICA_UID
from tests.api.conftest import CRDS, EXAMPLES, load_yaml_docs, schema_in_crd
from tests.operator.factories import pool

GPU_DOC = load_yaml_docs(EXAMPLES / "replicapool-gpu.yaml")[0]
GPU_POOL = ReplicaPool.model_validate(GPU_DOC)
POOL_SCHEMA = schema_in_crd(load_yaml_docs(CRDS / "lorafleet.dev_replicapools.yaml")[0])


def pod_spec(p: ReplicaPool):
    return plan_pool_objects(p, "ns", 2).statefulset["spec"]["template"]["spec"]


def containers(p: ReplicaPool):
    return {c["name"]: c for c in pod_spec(p)["containers"]}


def test_statefulset_of_a_pool_with_every_template_field_passes_the_kubernetes_schema():
    sts = plan_pool_objects(GPU_POOL, "lorafleet", 2).statefulset
    kubernetes_validate.validate(sts, "1.30", strict=True)
    # Round trip through YAML, as `kubectl apply` would send it.
    kubernetes_validate.validate(yaml.safe_load(yaml.safe_dump(sts)), "1.30", strict=True)


def test_gpu_taint_toleration_and_node_selector_render_into_the_statefulset():
    spec = pod_spec(GPU_POOL)
    template = GPU_DOC["spec"]["template"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    for field in (
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "serviceAccountName",
        "runtimeClassName",
        "imagePullSecrets",
    ):
        assert spec[field] == template[field], field
    assert {
        "name": "models",
        "persistentVolumeClaim": {"claimName": "shared-models", "readOnly": True},
    } in spec["volumes"]
    for c in spec["containers"]:
        assert {"name": "models", "mountPath": "/models", "readOnly": True} in c["volumeMounts"]
        assert c["envFrom"] == template["envFrom"]
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["LORAFLEET_AGENT_S3_ENDPOINT_URL"] == "http://minio.storage:9000"
    meta = plan_pool_objects(GPU_POOL, "ns", 2).statefulset["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "ml-platform"
    assert meta["annotations"] == template["metadata"]["annotations"]


def test_engine_gets_one_gpu_by_default_and_none_on_a_cpu_pool():
    default = containers(pool("p"))["vllm"]["resources"]
    assert default["limits"]["nvidia.com/gpu"] == "1"
    assert default["requests"]["cpu"] == "4"
    cpu = containers(pool("p", engine={"gpus": 0}))["vllm"]["resources"]
    assert not any(k.endswith("/gpu") for k in cpu.get("limits", {}))
    amd = containers(pool("p", engine={"gpus": 2, "gpuResource": "amd.com/gpu"}))["vllm"]
    assert amd["resources"]["limits"]["amd.com/gpu"] == "2"
    assert amd["args"][amd["args"].index("--tensor-parallel-size") + 1] == "2"
    own = pool("p", engine={"resources": {"limits": {"nvidia.com/gpu": 4}}})
    assert containers(own)["vllm"]["resources"]["limits"]["nvidia.com/gpu"] == 4


def test_every_container_has_resources_and_a_restricted_security_context():
    spec = pod_spec(GPU_POOL)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == REPLICA_UID
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"]:
        assert set(c["resources"]) == {"requests", "limits"}, c["name"]
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
    by_name = {c["name"]: c for c in spec["containers"]}
    assert by_name["agent"]["securityContext"]["readOnlyRootFilesystem"] is True
    # vLLM writes JIT caches (torch.compile, Triton) under $HOME at run time.
    assert by_name["vllm"]["securityContext"]["readOnlyRootFilesystem"] is False


def test_platform_security_mode_leaves_ids_to_the_platform_and_passes_restricted_v2():
    # OpenShift's restricted-v2 assigns UID, GID and fsGroup from the namespace's range and
    # refuses pods that fix them; the rest of its rules still hold.
    doc = copy.deepcopy(GPU_DOC)
    doc["spec"]["template"]["securityMode"] = "platform"
    assert validate(POOL_SCHEMA, doc) == []
    p = ReplicaPool.model_validate(doc)
    sts = plan_pool_objects(p, "lorafleet", 2).statefulset
    kubernetes_validate.validate(sts, "1.30", strict=True)
    spec = sts["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert not {"runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy"} & set(pod)
    assert pod["runAsNonRoot"] is True
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert not {"runAsUser", "runAsGroup"} & set(sc)
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
    bad = copy.deepcopy(GPU_DOC)
    bad["spec"]["template"]["securityMode"] = "root"
    assert validate(POOL_SCHEMA, bad) != []


def test_replicas_spread_over_nodes_unless_the_template_says_how():
    # an adapter's two owners on one node would be lost together
    (spread,) = pod_spec(pool("spread"))["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # more replicas than nodes still run
    assert spread["labelSelector"]["matchLabels"]["lorafleet.dev/pool"] == "spread"
    zones = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"lorafleet.dev/pool": "z"}},
        }
    ]
    assert (
        pod_spec(pool("z", template={"topologySpreadConstraints": zones}))[
            "topologySpreadConstraints"
        ]
        == zones
    )


def test_startup_probe_covers_the_model_load_and_liveness_checks_vllm_itself():
    slow = pool("p", engine={"startupSeconds": 1800})
    vllm = containers(slow)["vllm"]
    startup = vllm["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 1800
    assert startup["exec"]["command"] == ["python3", "-m", "lorafleet_agent.probe", "engine"]
    # After start-up a hung engine is restarted within 30 s, not never.
    live = vllm["livenessProbe"]
    assert live["exec"] == startup["exec"]
    assert live["periodSeconds"] * live["failureThreshold"] <= 30
    agent = containers(slow)["agent"]
    assert agent["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert agent["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_commands_use_the_images_python3():
    for c in containers(GPU_POOL).values():
        assert c["command"][0] == "python3"
        assert c["lifecycle"]["preStop"]["exec"]["command"][0] == "python3"


def test_pre_stop_drains_for_the_pools_drain_time_within_the_grace_period():
    p = pool("p", engine={"drainSeconds": 300})
    spec = pod_spec(p)
    for c in spec["containers"]:
        cmd = c["lifecycle"]["preStop"]["exec"]["command"]
        assert cmd[:4] == ["python3", "-m", "lorafleet_agent.probe", "drain"]
        assert cmd[cmd.index("--timeout") + 1] == "300"
    assert spec["terminationGracePeriodSeconds"] > 300


def test_lorafleet_env_and_labels_win_over_the_template():
    p = pool(
        "p",
        template={
            "env": [
                {"name": "LORAFLEET_AGENT_MAX_RANK", "value": "256"},
                {"name": "X", "value": "1"},
            ],
            "metadata": {"labels": {"lorafleet.dev/pool": "other"}},
        },
    )
    agent = containers(p)["agent"]
    ranks = [e for e in agent["env"] if e["name"] == "LORAFLEET_AGENT_MAX_RANK"]
    assert ranks == [{"name": "LORAFLEET_AGENT_MAX_RANK", "value": "16"}]
    assert {"name": "X", "value": "1"} in agent["env"]
    labels = plan_pool_objects(p, "ns", 1).statefulset["spec"]["template"]["metadata"]["labels"]
    assert labels["lorafleet.dev/pool"] == "p"


@pytest.mark.parametrize(
    "template",
    [
        {"volumes": [{"name": "cache", "emptyDir": {}}]},
        {"volumeMounts": [{"name": "x", "mountPath": "/var/cache/lorafleet"}]},
    ],
)
def test_template_may_not_take_lorafleets_volume_names_or_paths(template):
    with pytest.raises(ValidationError, match="reserves"):
        pool("p", template=template)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("engine.resources", {"limits": {"nvidia.com/gpu": "1 GPU"}}),
        ("template.tolerations", [{"key": "k", "tolerationSeconds": "soon"}]),
        ("template.env", [{"value": "no name"}]),
        (
            "template.affinity",
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
        ),
    ],
)
def test_crd_refuses_malformed_pod_fields(path, value):
    doc = copy.deepcopy(GPU_DOC)
    section, field = path.split(".")
    doc["spec"][section][field] = value
    assert validate(POOL_SCHEMA, doc) != []


def test_crd_accepts_the_gpu_example():
    assert validate(POOL_SCHEMA, GPU_DOC) == []


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [  # RFC 7386, Appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "foo"}, "bar", "bar"),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_applies_an_update_as_the_api_server_does(target, patch, result):
    assert merge_patch(target, patch) == result


def test_taking_a_field_out_of_the_template_removes_it_from_the_statefulset():
    before = plan_pool_objects(GPU_POOL, "ns", 2).statefulset
    bare = GPU_POOL.model_copy(deep=True)
    bare.spec.template = type(bare.spec.template)()
    after = merge_patch(before, plan_pool_objects(bare, "ns", 2).statefulset)
    pod = after["spec"]["template"]
    for field in ("nodeSelector", "tolerations", "affinity", "serviceAccountName"):
        assert field not in pod["spec"], field
    assert "annotations" not in pod["metadata"]
    # Lists are replaced whole; a null field inside one decodes as unset.
    assert all(c.get("envFrom") is None for c in pod["spec"]["containers"])
    assert not any(v["name"] == "models" for v in pod["spec"]["volumes"])


TOKEN_REVIEW = InsideAuth(
    mode="tokenReview",
    audience="lorafleet-agent",
    callers=("lf:lorafleet-gateway", "lf:lorafleet-operator"),
    service_account="lorafleet-agent",
)


def _agent_settings_from(env: list[dict[str, Any]]) -> AgentSettings:
    """What the agent reads from its container env (downward-API fields given values)."""
    plain = {e["name"]: e.get("value", "from-api") for e in env}
    saved = dict(os.environ)
    try:
        os.environ.update(plain)
        return AgentSettings()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_token_review_mode_gives_the_agent_its_account_and_no_shared_token():
    bare = pool("tr")  # no template ServiceAccount: the chart's agent account is used
    sts = plan_pool_objects(bare, "lf", 2, TOKEN_REVIEW).statefulset
    kubernetes_validate.validate(sts, "1.30", strict=True)
    spec = sts["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "lorafleet-agent"
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    names = {e["name"]: e for e in agent["env"]}
    assert "LORAFLEET_AGENT_INTERNAL_TOKEN" not in names  # no shared secret to leak
    assert names["LORAFLEET_AGENT_POD_UID"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.uid"}
    }
    settings = _agent_settings_from(agent["env"])
    assert settings.internal_auth == "tokenReview"
    assert settings.internal_audience == "lorafleet-agent"
    assert settings.internal_service_accounts == "lf:lorafleet-gateway,lf:lorafleet-operator"
    assert settings.kube_events
    # vLLM's key still comes from the pool's Secret: only the agent holds it. So does the
    # data-port token: a shared secret in every mode (no API server on the data path).
    vllm_key = names["LORAFLEET_AGENT_VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert vllm_key["name"] == "tr-internal"
    data_token = names["LORAFLEET_AGENT_DATA_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert data_token == {"name": "tr-internal", "key": "data-token"}


@pytest.mark.parametrize("inside", [None, TOKEN_REVIEW])
def test_no_template_env_turns_the_agents_internal_credential_off_or_swaps_its_kind(inside):
    hostile = [
        {"name": "LORAFLEET_AGENT_ALLOW_UNAUTHENTICATED_INTERNAL", "value": "true"},
        {"name": "LORAFLEET_AGENT_INTERNAL_AUTH", "value": "tokenReview"},
    ]
    p = pool("envy", template={"env": hostile})
    sts = plan_pool_objects(p, "lf", 1, *([inside] if inside else [])).statefulset
    agent = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "agent")
    ours = [e for e in agent["env"] if e["name"] in {h["name"] for h in hostile}]
    assert len(ours) == 2  # one entry each: ours; in Kubernetes env also wins over envFrom
    settings = _agent_settings_from(agent["env"])
    assert settings.allow_unauthenticated_internal is False
    assert settings.internal_auth == ("tokenReview" if inside else "secret")


def test_secret_mode_keeps_the_shared_token_and_no_api_access():
    agent = containers(pool("sec"))["agent"]
    names = {e["name"]: e for e in agent["env"]}
    assert names["LORAFLEET_AGENT_INTERNAL_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "sec-internal",
        "key": "agent-token",
    }
    assert names["LORAFLEET_AGENT_INTERNAL_AUTH"]["value"] == "secret"  # set, not defaulted
    assert "LORAFLEET_AGENT_KUBE_EVENTS" not in names
    assert pod_spec(pool("sec"))["serviceAccountName"] is None


def test_a_template_service_account_wins_over_the_agent_account():
    spec = plan_pool_objects(GPU_POOL, "ns", 1, TOKEN_REVIEW).statefulset["spec"]["template"]
    assert spec["spec"]["serviceAccountName"] == GPU_DOC["spec"]["template"]["serviceAccountName"]


def test_the_operators_log_format_reaches_agent_and_engine_only_when_not_the_default():
    """text (set on the operator by the chart's logFormat) goes to every agent and every vLLM
    (the image's engine logging config reads it); the default adds no variable, so the pod
    template, and every replica, stays as it was."""

    def env(log_format: str | None, container: str) -> dict[str, object]:
        sts = plan_pool_objects(GPU_POOL, "ns", 2, log_format=log_format).statefulset
        (found,) = [
            c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == container
        ]
        return {e["name"]: e.get("value") for e in found["env"]}

    for container in ("agent", "vllm"):
        assert env("text", container)["LORAFLEET_LOG_FORMAT"] == "text"
        assert "LORAFLEET_LOG_FORMAT" not in env(None, container)
