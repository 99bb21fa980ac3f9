"""The Helm chart renders, lints and validates offline (helm-python-sdk + kubernetes-validate).

No cluster: these check what `helm install` would send, and that the security-relevant shape
(public port only on the public Service, replicas reachable only from lorafleet) holds.
"""

from __future__ import annotations

import copy
import filecmp
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from lorafleet_core.api import crd_validation
from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.planning.pool import plan_pool_objects
from tests.chart.chart_render import (
    ALL_ON,
    CHART,
    CI_VALUES,
    KUBE_VERSION,
    POOL_SPEC,
    ROOT,
    by_kind,
    ci_values,
    deployment,
    notes,
    render,
    validate_builtin,
)


def test_lint_is_clean():
    report = helm_python.lint(str(CHART), ALL_ON, strict=True)
    errors = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    # "icon is recommended" is info (severity 1); warnings and errors fail.
    assert errors == []


@pytest.mark.parametrize("values", [{}, ALL_ON], ids=["defaults", "all-options"])
def test_builtin_kinds_validate_against_kubernetes_schemas(values):
    docs = render(values)
    builtin = [
        d
        for d in docs
        if "." not in d["apiVersion"].split("/")[0]
        or d["apiVersion"].startswith(("apps/", "rbac.", "networking.", "policy/"))
    ]
    assert {"Deployment", "Service", "Role", "NetworkPolicy"} <= {d["kind"] for d in builtin}
    for doc in builtin:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_defaults_leave_optional_parts_out():
    kinds = {d["kind"] for d in render()}
    assert "ReplicaPool" not in kinds
    assert "PrometheusRule" not in kinds
    assert "ServiceMonitor" not in kinds


def test_created_replica_pool_passes_the_crd_schema_and_rules():
    (pool,) = by_kind(render(ALL_ON), "ReplicaPool")
    schema = crd_validation.schema_of("ReplicaPool")
    assert crd_validation.validate(schema, pool) == []


def test_a_replica_pool_whose_extra_args_open_vllm_renders_an_object_the_crd_refuses():
    spec: dict[str, Any] = copy.deepcopy(POOL_SPEC)
    spec.setdefault("engine", {})["extraArgs"] = ["--trust-remote-code"]
    values = {**ALL_ON, "replicaPool": {"create": True, "name": "main", "spec": spec}}
    (pool,) = by_kind(render(values), "ReplicaPool")
    (problem,) = crd_validation.validate(crd_validation.schema_of("ReplicaPool"), pool)
    assert problem.startswith("spec.engine.extraArgs: extraArgs may not set flags"), problem


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"replicas": 0}},
        {"operator": {"replicas": 2}},
        {"gateway": {"port": "eighty"}},
        {"unknownKey": True},
        # A pool's name names its StatefulSet and Service (models.POOL_NAME).
        {"replicaPool": {"name": "7b"}},
        {"replicaPool": {"name": "p" * 53}},
        {"gateway": {"pool": "llama.7b"}},
        {"gateway": {"pools": ["ok", "9lives"]}},
        # The replicas' PodDisruptionBudget: a count of replicas, not a word or a negative.
        {"replicaPool": {"spec": {"disruptionBudget": {"maxUnavailable": "two"}}}},
        {"replicaPool": {"spec": {"disruptionBudget": {"maxUnavailable": -1}}}},
        {"replicaPool": {"spec": {"disruptionBudget": {"maxUnavailable": "101%"}}}},
    ],
)
def test_values_schema_refuses_bad_values(values):
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmError):
        chart.validate_schema(values)


@pytest.mark.parametrize("budget", [3, "25%"])
def test_the_replica_pools_disruption_budget_is_a_value_the_crd_accepts(budget):
    """replicaPool.spec.disruptionBudget.maxUnavailable (a count or a percentage) reaches the
    ReplicaPool the chart creates, passes the CRD, and sets its PodDisruptionBudget; unset, the
    budget stays 1."""
    spec: dict[str, Any] = {
        **copy.deepcopy(POOL_SPEC),
        "disruptionBudget": {"maxUnavailable": budget},
    }
    values = {**ALL_ON, "replicaPool": {"create": True, "name": "main", "spec": spec}}
    (pool,) = by_kind(render(values), "ReplicaPool")
    assert pool["spec"]["disruptionBudget"] == {"maxUnavailable": budget}
    assert crd_validation.validate(crd_validation.schema_of("ReplicaPool"), pool) == []
    parsed = ReplicaPool.model_validate(pool)
    assert plan_pool_objects(parsed, "ns", 1).pdb["spec"]["maxUnavailable"] == budget
    (default,) = by_kind(render(ALL_ON), "ReplicaPool")
    pdb = plan_pool_objects(ReplicaPool.model_validate(default), "ns", 1).pdb
    assert pdb["spec"]["maxUnavailable"] == 1


def test_replica_pool_needs_a_base_model():
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmError, match="baseModel"):
        chart.render({"replicaPool": {"create": True, "spec": {}}}, name="lf", namespace="x")


def test_chart_crds_match_generated_crds():
    generated = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == generated
    _, mismatch, errors = filecmp.cmpfiles(ROOT / "crds", CHART / "crds", generated, shallow=False)
    assert (mismatch, errors) == ([], []), "run `make crds` to refresh charts/lorafleet/crds"


def test_operator_runs_standalone_in_the_release_namespace():
    (op,) = [d for d in by_kind(render(), "Deployment") if "operator" in d["metadata"]["name"]]
    container = op["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "lorafleet_operator"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LORAFLEET_OPERATOR_NAMESPACES"] == "serving"
    assert env["LORAFLEET_OPERATOR_LIVENESS_ENDPOINT"].endswith(":8080/healthz")
    assert op["spec"]["replicas"] == 1


def test_operator_replica_capacity_value_reaches_its_settings():
    from lorafleet_operator.settings import OperatorSettings

    def capacity(values: dict[str, Any] | None) -> float:
        (op,) = [
            d for d in by_kind(render(values), "Deployment") if "operator" in d["metadata"]["name"]
        ]
        env = {
            e["name"]: e.get("value")
            for e in op["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        value = env["LORAFLEET_OPERATOR_REPLICA_TOKENS_PER_SECOND"]
        return OperatorSettings.model_validate(
            {"replica_tokens_per_second": value}
        ).replica_tokens_per_second

    assert capacity(None) == OperatorSettings().replica_tokens_per_second == 640
    assert capacity({"operator": {"replicaTokensPerSecond": 1500}}) == 1500
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema({"operator": {"replicaTokensPerSecond": 0}})


@pytest.mark.parametrize("path", CI_VALUES, ids=lambda p: p.name)
def test_ci_values_render_and_validate(path):
    values = yaml.safe_load(path.read_text())
    helm_python.Chart.load(CHART).validate_schema(values)
    report = helm_python.lint(str(CHART), values, strict=True)
    assert [m for m in report["messages"] if m["severity"] >= 2] + report["errors"] == []
    others = validate_builtin(render(values))
    for doc in others:
        if doc["kind"] == "ReplicaPool":
            assert crd_validation.validate(crd_validation.schema_of("ReplicaPool"), doc) == []
        elif doc["kind"] == "HTTPRoute":
            rule = doc["spec"]["rules"][0]
            assert rule["backendRefs"] == [{"name": "lf-lorafleet-gateway", "port": 80}]
            assert doc["spec"]["parentRefs"][0]["name"] == "public"
        else:
            assert doc["apiVersion"].startswith("monitoring.coreos.com/"), doc["kind"]


def test_every_chart_pod_runs_restricted_with_runtime_default_seccomp():
    for values in [{}, *map(yaml.safe_load, (p.read_text() for p in CI_VALUES))]:
        for deploy in by_kind(render(values), "Deployment"):
            pod = deploy["spec"]["template"]["spec"]
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert pod["securityContext"]["runAsNonRoot"] is True
            for c in pod["containers"]:
                assert c["securityContext"]["allowPrivilegeEscalation"] is False
                assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
                assert c["command"][0] == "python3"


def test_network_policy_peers_take_namespace_selectors():
    docs = render(ci_values("gpu-cluster-values.yaml"))
    policies = {p["metadata"]["name"]: p for p in by_kind(docs, "NetworkPolicy")}
    replicas = policies["lf-lorafleet-replicas"]["spec"]["ingress"]
    monitoring = replicas[2]
    assert monitoring["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    assert [p["port"] for p in monitoring["ports"]] == [8101]  # metrics only, not the data port
    gateway = policies["lf-lorafleet-gateway"]["spec"]["ingress"]
    assert gateway[0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-nginx"
    }
    assert [p["port"] for p in gateway[1]["ports"]] == [9090]
    # Defaults: Prometheus in any namespace may scrape.
    default = {p["metadata"]["name"]: p for p in by_kind(render(), "NetworkPolicy")}
    peer = default["lf-lorafleet-replicas"]["spec"]["ingress"][2]["from"][0]
    assert peer["namespaceSelector"] == {}


def test_operator_pod_policy_admits_the_control_api_only_from_its_peers():
    """The operator's pod (its reconcile loop) is not reachable from any pod: the control API
    port from the release's namespace and the allowed ServiceAccounts' namespaces, or from
    networkPolicy.controlPeers; metrics from the monitoring peers; health from anywhere."""

    def operator_ingress(values: dict[str, Any]) -> list[dict[str, Any]]:
        policies = {p["metadata"]["name"]: p for p in by_kind(render(values), "NetworkPolicy")}
        spec = policies["lf-lorafleet-operator"]["spec"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
        assert spec["policyTypes"] == ["Ingress"]
        ingress: list[dict[str, Any]] = spec["ingress"]
        return ingress

    off = operator_ingress({})
    assert [[p["port"] for p in rule["ports"]] for rule in off] == [[8080], [9090]]
    assert "from" not in off[0]
    assert off[1]["from"][0]["namespaceSelector"] == {}
    accounts = ["pipelines:trainer", "serving:x", "ml:y", "pipelines:z"]
    on = operator_ingress({"operator": {"control": {"enabled": True, "serviceAccounts": accounts}}})
    control = on[2]
    assert [p["port"] for p in control["ports"]] == [8102]
    assert control["from"] == [
        {"podSelector": {}},
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["pipelines", "ml"],
                    }
                ]
            }
        },
    ]
    peers = [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}]
    chosen = operator_ingress(
        {"operator": {"control": {"enabled": True}}, "networkPolicy": {"controlPeers": peers}}
    )
    assert chosen[2]["from"] == peers


def test_placement_env_annotations_and_pull_secrets_are_rendered_not_dropped():
    values = ci_values("gpu-cluster-values.yaml")
    docs = render(values)
    deployments = {d["metadata"]["name"]: d for d in by_kind(docs, "Deployment")}
    gw = deployments["lf-lorafleet-gateway"]["spec"]["template"]
    spec, g = gw["spec"], values["gateway"]
    assert spec["imagePullSecrets"] == [{"name": "ghcr-pull"}]
    assert spec["nodeSelector"] == g["nodeSelector"]
    assert spec["tolerations"] == g["tolerations"]
    assert spec["topologySpreadConstraints"] == g["topologySpreadConstraints"]
    assert spec["priorityClassName"] == "lorafleet-gateway"
    assert gw["metadata"]["annotations"] == g["podAnnotations"]
    assert gw["metadata"]["labels"]["tier"] == "edge"
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["LORAFLEET_GATEWAY_RATE_LIMIT_BACKEND"]["value"] == "redis"
    assert env["LORAFLEET_GATEWAY_RATE_LIMIT_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "lorafleet-redis",
        "key": "redis-password",
    }
    services = {s["metadata"]["name"]: s for s in by_kind(docs, "Service")}
    public = services["lf-lorafleet-gateway"]
    assert public["metadata"]["annotations"] == g["service"]["annotations"]
    assert public["metadata"]["labels"]["exposure"] == "public"
    assert services["lf-lorafleet-gateway-internal"]["metadata"]["annotations"] == {
        "example.com/owner": "sre"
    }
    (ingress,) = by_kind(docs, "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    op = deployments["lf-lorafleet-operator"]["spec"]["template"]["spec"]
    assert op["tolerations"] == values["operator"]["tolerations"]
    assert op["priorityClassName"] == "system-cluster-critical"


def test_notes_warn_about_per_pod_limits_and_unselected_monitors():
    text = notes({"monitoring": {"serviceMonitor": True}})
    assert "up to 2x its limit" in text
    assert "maxConcurrentRequests (64) is per gateway pod" in text
    assert "monitoring.labels is empty" in text
    uncapped = notes({"gateway": {"rateLimits": {"maxConcurrentRequests": 0}}})
    assert "maxConcurrentRequests" not in uncapped
    quiet = notes(ci_values("gpu-cluster-values.yaml"))
    assert "WARNING" not in quiet
    assert "monitoring.labels is empty" not in quiet


def test_chart_names_its_maintainers():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["maintainers"][0]["name"]
    assert chart["kubeVersion"].startswith(">=1.30")


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"rateLimit": {}}},
        {"gateway": {"rateLimits": {"redis": {"uri": "redis://x"}}}},
        {"gateway": {"service": {"anotations": {}}}},
        {"gateway": {"ingress": {"hosts": [{"hots": "x"}]}}},
        {"gateway": {"tolerations": [{"efect": "NoSchedule"}]}},
        {"gateway": {"resources": {"request": {"cpu": "1"}}}},
        {"gateway": {"affinity": {"nodeAfinity": {}}}},
        {"operator": {"extraEnv": [{"value": "no name"}]}},
        {"networkPolicy": {"monitoringPeer": []}},
        {"networkPolicy": {"monitoringPeers": [{"namespaceSelecter": {}}]}},
        {"monitoring": {"label": {"release": "x"}}},
        {"imagePullSecrets": [{"nam": "x"}]},
        {"replicaPool": {"creat": True}},
        {"internalAuth": {"mod": "secret"}},
        {"internalAuth": {"mode": "none"}},
        {"internalAuth": {"tokenExpirationSeconds": 60}},
    ],
)
def test_values_schema_refuses_typos_at_every_level(values):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema(values)


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_log_format_reaches_the_gateway_and_the_operator(fmt):
    """One value sets LORAFLEET_LOG_FORMAT on both Deployments (json by default); the operator
    passes text on to the replica pods itself."""
    docs = render({} if fmt == "json" else {"logFormat": fmt})
    for part in ("gateway", "operator"):
        (container,) = deployment(docs, part)["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["LORAFLEET_LOG_FORMAT"] == fmt


def test_an_unknown_log_format_is_refused_by_the_schema():
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema({"logFormat": "xml"})
