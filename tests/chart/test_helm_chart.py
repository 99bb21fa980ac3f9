"""The Helm chart renders, lints and validates offline (helm-python-sdk + kubernetes-validate).

No cluster: these check what `helm install` would send, and that the security-relevant shape
(public port only on the public Service, replicas reachable only from lorafleet) holds.
"""

from __future__ import annotations

import filecmp
import json
import re
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from lorafleet_core import crd_validation

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "lorafleet"
KUBE_VERSION = "1.30.0"
POOL_SPEC = {
    "baseModel": {"name": "llama-7b", "hash": "sha256:" + "a" * 64, "uri": "s3://models/llama/"},
    "replicas": {"min": 2, "max": 8},
}
ALL_ON = {
    "monitoring": {"serviceMonitor": True, "prometheusRule": True, "grafanaDashboard": True},
    "replicaPool": {"create": True, "name": "main", "spec": POOL_SPEC},
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(CHART)
    rendered = chart.render(values or {}, name="lf", namespace="serving")
    docs: list[dict[str, Any]] = []
    for text in rendered.values():
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


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


def test_public_service_exposes_only_the_openai_port():
    services = {s["metadata"]["name"]: s for s in by_kind(render(), "Service")}
    public = services["lf-lorafleet-gateway"]
    assert [p["targetPort"] for p in public["spec"]["ports"]] == ["http"]
    internal = services["lf-lorafleet-gateway-internal"]
    assert public["spec"]["type"] == "ClusterIP"
    assert [p["targetPort"] for p in internal["spec"]["ports"]] == ["internal"]


def test_gateway_is_configured_for_kubernetes_catalog():
    (gateway,) = [d for d in by_kind(render(), "Deployment") if "gateway" in d["metadata"]["name"]]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LORAFLEET_GATEWAY_CATALOG"] == "kubernetes"
    assert env["LORAFLEET_GATEWAY_NAMESPACE"] == "serving"


def test_gateway_role_is_read_only():
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "Role")}
    verbs = {v for rule in roles["lf-lorafleet-gateway"]["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}


def test_replicas_only_reachable_from_the_release():
    (policy,) = by_kind(render(), "NetworkPolicy")
    ports = {p["port"] for p in policy["spec"]["ingress"][0]["ports"]}
    assert ports == {8100, 8101}
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_created_replica_pool_passes_the_crd_schema_and_rules():
    (pool,) = by_kind(render(ALL_ON), "ReplicaPool")
    schema = crd_validation.schema_of("ReplicaPool")
    assert crd_validation.validate(schema, pool) == []


def test_dashboard_and_alerts_ship_with_monitoring_enabled():
    docs = render(ALL_ON)
    (dashboard,) = by_kind(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "lorafleet_gateway_ttft_seconds_bucket" in dashboard["data"]["lorafleet.json"]
    (rule,) = by_kind(docs, "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"LorafleetTTFTp95AboveTarget", "LorafleetAdapterThrashing"} <= alerts


@pytest.mark.parametrize(
    "values",
    [
        {"gateway": {"replicas": 0}},
        {"operator": {"replicas": 2}},
        {"gateway": {"port": "eighty"}},
        {"unknownKey": True},
    ],
)
def test_values_schema_refuses_bad_values(values):
    chart = helm_python.Chart.load(CHART)
    with pytest.raises(helm_python.HelmError):
        chart.validate_schema(values)


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
    assert container["command"] == ["python", "-m", "lorafleet_operator"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["LORAFLEET_OPERATOR_NAMESPACES"] == "serving"
    assert env["LORAFLEET_OPERATOR_LIVENESS_ENDPOINT"].endswith(":8080/healthz")
    assert op["spec"]["replicas"] == 1


def _exported_metric_names() -> set[str]:
    """Every series name the gateway, the agent and the operator can export (histogram parts
    included)."""
    from prometheus_client.core import HistogramMetricFamily

    from lorafleet_agent.metrics import AgentMetrics
    from lorafleet_gateway.metrics import GatewayMetrics
    from lorafleet_operator.metrics import OperatorMetrics

    names: set[str] = set()
    registries = (
        GatewayMetrics().registry,
        AgentMetrics().registry,
        OperatorMetrics(dict).registry,
    )
    for registry in registries:
        for family in registry.collect():
            if isinstance(family, HistogramMetricFamily) or family.type == "histogram":
                names |= {f"{family.name}_{s}" for s in ("bucket", "count", "sum")}
            elif family.type == "counter":
                names.add(f"{family.name}_total")
            else:
                names.add(family.name)
    return names


def test_dashboard_filters_by_namespace_and_pool_over_rate_interval():
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"namespace", "pool"} <= variables
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for expr in exprs:
        assert not re.search(r"\[\d+[smh]\]", expr), f"fixed range in {expr}"
        for selector in re.findall(r"lorafleet_[a-z_]+(\{[^}]*\})?", expr):
            assert 'namespace=~"$namespace"' in selector, expr
    agent = [e for e in exprs if "lorafleet_agent_" in e]
    assert agent
    assert all('pool=~"$pool"' in e for e in agent)
    assert any("stream_error" in e for e in exprs)


def test_dashboard_and_alerts_only_query_metrics_that_exist():
    # A renamed metric must not leave a silent, empty panel or an alert that never fires.
    docs = render(ALL_ON)
    (rule,) = by_kind(docs, "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dashboard = (CHART / "files" / "dashboard.json").read_text()
    queried = set(re.findall(r"lorafleet_[a-z_]+", " ".join(exprs) + dashboard))
    assert queried, "no lorafleet metric found in the dashboard or alerts"
    assert queried - _exported_metric_names() == set()
