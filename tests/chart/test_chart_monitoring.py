"""The chart's monitoring: dashboard and alerts ship with monitoring on, query only metrics the
code exports and filter by namespace and pool; the cost rule; the monitoring objects' labels."""

from __future__ import annotations

import json
import re

from tests.chart.chart_render import ALL_ON, CHART, by_kind, ci_values, render
from tests.exported_metrics import exported_families, series_names


def test_dashboard_and_alerts_ship_with_monitoring_enabled():
    docs = render(ALL_ON)
    (dashboard,) = by_kind(docs, "ConfigMap")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert "lorafleet_gateway_ttft_seconds_bucket" in dashboard["data"]["lorafleet.json"]
    (rule,) = by_kind(docs, "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert {"LorafleetTTFTp95AboveTarget", "LorafleetAdapterThrashing"} <= alerts
    records = {r["record"] for r in rules if "record" in r}
    assert "lorafleet:cost_per_million_tokens:rate5m" in records
    assert "lorafleet:cost_per_million_tokens:rate5m" in dashboard["data"]["lorafleet.json"]


def test_cost_rule_takes_the_configured_gpu_price():
    monitoring = {"serviceMonitor": True, "prometheusRule": True, "gpuHourlyPrice": 4.75}
    values = {**ALL_ON, "monitoring": monitoring}
    (rule,) = by_kind(render(values), "PrometheusRule")
    (cost,) = [
        r
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if r.get("record") == "lorafleet:cost_per_million_tokens:rate5m"
    ]
    assert "* 1 * 4.75 / 3600" in cost["expr"]


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
    engine = [e for e in exprs if "vllm:" in e]
    assert engine
    for expr in engine:
        for selector in re.findall(r"vllm:[a-z_]+(\{[^}]*\})?", expr):
            assert 'namespace=~"$namespace",pool=~"$pool"' in selector, expr
    assert any("stream_error" in e for e in exprs)


def test_dashboard_has_a_tenant_variable_the_tenant_panels_filter_by():
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    (tenant,) = [v for v in dashboard["templating"]["list"] if v["name"] == "tenant"]
    assert "tenant)" in tenant["query"]["query"]
    assert tenant["includeAll"]
    by_tenant = [
        t["expr"]
        for p in dashboard["panels"]
        for t in p.get("targets", [])
        if "by (tenant)" in t["expr"]
    ]
    assert by_tenant
    assert all('tenant=~"$tenant"' in e for e in by_tenant)


def test_dashboard_units_are_not_unitless_for_rates_and_money():
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    units = {
        p["title"]: p["fieldConfig"]["defaults"]["unit"]
        for p in dashboard["panels"]
        if p["type"] == "timeseries"
    }
    assert units["Cost per million tokens"] == "currencyUSD"
    assert units["Adapter loads/min by source tier"] == "opm"
    assert units["KV-cache use per replica"] == "percentunit"
    per_minute = [t for t in units if "/min" in t]
    assert per_minute
    assert all(units[t] == "opm" for t in per_minute)


def test_dashboard_and_alerts_only_query_metrics_that_exist():
    # A renamed metric must not leave a silent, empty panel or an alert that never fires.
    docs = render(ALL_ON)
    (rule,) = by_kind(docs, "PrometheusRule")
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    dashboard = (CHART / "files" / "dashboard.json").read_text()
    queried = set(re.findall(r"lorafleet_[a-z_]+", " ".join(exprs) + dashboard))
    assert queried, "no lorafleet metric found in the dashboard or alerts"
    assert queried - series_names(exported_families()) == set()


def test_monitoring_labels_reach_every_monitoring_object():
    docs = render(ci_values("gpu-cluster-values.yaml"))
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert by_kind(docs, kind), kind
        for obj in by_kind(docs, kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind
            assert obj["metadata"]["labels"]["team"] == "ml-platform", kind  # commonLabels
    (rule,) = by_kind(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["role"] == "alert-rules"
    (dashboard,) = by_kind(docs, "ConfigMap")
    # the Grafana sidecar reads the folder from an annotation
    assert dashboard["metadata"]["annotations"]["grafana_folder"] == "lorafleet"
    assert "grafana_folder" not in dashboard["metadata"]["labels"]
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    (endpoint,) = monitors["lf-lorafleet-gateway"]["spec"]["endpoints"]
    assert endpoint["interval"] == "30s"
    cluster_label = {"targetLabel": "cluster", "replacement": "gpu-east-1"}
    assert (endpoint["scrapeTimeout"], endpoint["relabelings"]) == ("20s", [cluster_label])
    (pods,) = by_kind(docs, "PodMonitor")
    (replicas,) = pods["spec"]["podMetricsEndpoints"]
    assert replicas["scrapeTimeout"] == "20s"
    # the pool label the dashboard and alerts group by stays first
    assert [r.get("targetLabel") for r in replicas["relabelings"]] == ["pool", "cluster"]


def test_runbook_links_point_at_the_configured_base():
    base = "https://wiki.example.com/lorafleet/runbook"
    values = {"monitoring": {"prometheusRule": True, "runbookUrl": base}}
    (rule,) = by_kind(render(values), "PrometheusRule")
    urls = [
        r["annotations"]["runbook_url"]
        for g in rule["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert urls
    assert all(u.startswith(base + "#") for u in urls)


def test_dashboard_marks_alias_deploys_and_rollbacks():
    """An annotation on the gateways' alias-change counter (max over gateway pods: each counts
    the same change) marks every deploy or rollback on every panel's time axis."""
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    (deploys,) = [a for a in dashboard["annotations"]["list"] if "alias" in a["name"].lower()]
    assert deploys["enable"]
    assert deploys["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    expr = deploys["expr"]
    assert expr.startswith("max by (namespace) (increase(lorafleet_gateway_alias_changes_total{")
    assert 'namespace=~"$namespace"' in expr
