"""The chart's Grafana dashboard against a real Prometheus (tests/prometheus_server.py).

- `monitor_jobs`: scrape jobs for running processes as the chart's ServiceMonitor (gateway)
  and PodMonitor (replicas) make them: the labels the Prometheus Operator derives from
  Kubernetes discovery (namespace, pod, service, job, endpoint) given as the discovery's
  `__meta_*` labels, then the chart's own relabelings as rendered. No credential: the chart's
  monitors send none (`/metrics` is open on the internal ports, docs/reference/agent.md).
- `panel_queries` / `variable_queries`: every panel target's and template variable's query,
  with the variables substituted the way Grafana does with "All" selected (each variable's
  `allValue`) and `$__rate_interval` at 1m; a variable the dashboard does not define fails.
- `ask`: each query through `/api/v1/query`: its error (`bad_data` for a broken expression)
  or the series it returned.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.chart.chart_render import ALL_ON, CHART, by_kind, render
from tests.prometheus_server import Prometheus, ScrapeJob, prometheus_spelling

DASHBOARD = CHART / "files" / "dashboard.json"
NAMESPACE = "serving"  # chart_render's release namespace: the recording rules filter by it
# Grafana's $__rate_interval is max(4 x scrape interval, $__interval + scrape interval); 1m
# holds several of the test's 2 s scrapes, as it holds several 15 s ones in a cluster.
GRAFANA_BUILTINS = {"__rate_interval": "1m"}


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _discovery(namespace: str, pod: str) -> dict[str, str]:
    return {"__meta_kubernetes_namespace": namespace, "__meta_kubernetes_pod_name": pod}


def _copy(source: str, target: str) -> dict[str, Any]:
    return {"source_labels": [source], "target_label": target}


def monitor_jobs(
    gateway_internal_url: str, replicas: Sequence[tuple[str, str, str]]
) -> list[ScrapeJob]:
    """The gateway's internal port (`gateway_internal_url`) and each replica's agent
    (`(pod, pool, internal url)`) as the rendered monitors scrape them."""
    docs = render(ALL_ON)
    monitors = {m["metadata"]["name"]: m for m in by_kind(docs, "ServiceMonitor")}
    (gateway,) = monitors["lf-lorafleet-gateway"]["spec"]["endpoints"]
    (pods,) = by_kind(docs, "PodMonitor")
    (endpoint,) = pods["spec"]["podMetricsEndpoints"]
    service = "lf-lorafleet-gateway-internal"
    # What the Prometheus Operator generates ahead of a monitor's own relabelings.
    service_labels = [
        _copy("__meta_kubernetes_namespace", "namespace"),
        _copy("__meta_kubernetes_service_name", "service"),
        _copy("__meta_kubernetes_pod_name", "pod"),
        _copy("__meta_kubernetes_service_name", "job"),
        {"target_label": "endpoint", "replacement": gateway["port"]},
    ]
    pod_labels = [
        _copy("__meta_kubernetes_namespace", "namespace"),
        _copy("__meta_kubernetes_pod_name", "pod"),
        {"target_label": "job", "replacement": f"{NAMESPACE}/{pods['metadata']['name']}"},
        {"target_label": "endpoint", "replacement": endpoint["port"]},
    ]
    gateway_discovery = _discovery(NAMESPACE, "lf-lorafleet-gateway-0")
    gateway_discovery["__meta_kubernetes_service_name"] = service
    gateway_relabelings = [prometheus_spelling(r) for r in gateway.get("relabelings", [])]
    jobs = [
        ScrapeJob(
            "gateway",
            gateway_internal_url + gateway["path"],
            gateway_discovery,
            service_labels + gateway_relabelings,
        )
    ]
    pod_relabelings = [prometheus_spelling(r) for r in endpoint["relabelings"]]
    for pod, pool, url in replicas:
        discovery = _discovery(NAMESPACE, pod)
        discovery["__meta_kubernetes_pod_label_lorafleet_dev_pool"] = pool
        path = url + endpoint["path"]
        jobs.append(ScrapeJob(f"replica-{pod}", path, discovery, pod_labels + pod_relabelings))
    return jobs


def grafana_values(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """Each template variable's value with "All" selected, and Grafana's built-ins."""
    values = dict(GRAFANA_BUILTINS)
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            assert var.get("includeAll"), var["name"]
            assert "allValue" in var, var["name"]
            values[var["name"]] = var["allValue"]
    return values


def interpolate(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with `$name`, `${name}` and `[[name]]` replaced; an unknown name raises."""

    def one(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in values:
            raise KeyError(f"{expr!r} uses ${name}, which the dashboard does not define")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\[\[(\w+)\]\]|\$(\w+)", one, expr)


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str  # as Grafana sends it


def panel_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    values = grafana_values(dashboard)
    return [
        Query(panel["title"], target["refId"], interpolate(target["expr"], values))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def annotation_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    values = grafana_values(dashboard)
    return [
        Query(a["name"], "annotation", interpolate(a["expr"], values))
        for a in dashboard["annotations"]["list"]
        if "expr" in a
    ]


def variable_queries(dashboard: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """name -> (series selector, label) of each `label_values(selector, label)` variable."""
    values = grafana_values(dashboard)
    found = {}
    for var in dashboard["templating"]["list"]:
        if var["type"] != "query":
            continue
        text = interpolate(var["query"]["query"], values)
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text)
        assert match, f"variable {var['name']}: not label_values(selector, label): {text}"
        found[var["name"]] = (match[1], match[2])
    return found


@dataclass(frozen=True)
class Answer:
    query: Query
    error: str | None  # "bad_data: ..." when Prometheus refused the query
    series: tuple[tuple[dict[str, str], str], ...]  # (labels, value) of each series

    def summary(self) -> str:
        if self.error:
            return self.error
        if not self.series:
            return "no series"
        shown = [f"{_brief(labels)}={value}" for labels, value in self.series[:4]]
        more = f" (+{len(self.series) - 4})" if len(self.series) > 4 else ""
        return f"{len(self.series)} series: " + ", ".join(shown) + more


def _brief(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def ask(prom: Prometheus, query: Query) -> Answer:
    body = prom.query(query.expr)
    if body["status"] != "success":
        return Answer(query, f"{body['errorType']}: {body['error']}", ())
    result = body["data"]["result"]
    return Answer(query, None, tuple((s["metric"], s["value"][1]) for s in result))


def problems(answers: Sequence[Answer], allowed_empty: Mapping[str, str]) -> list[str]:
    """What is wrong with a dashboard's answers: a query Prometheus refused, a panel with a
    target that returned no series unless `allowed_empty` names it (title -> why), and an
    allowed panel that did return data (the list stays honest)."""
    found = [f"{a.query.panel} [{a.query.ref}]: {a.error}" for a in answers if a.error]
    empty = {a.query.panel for a in answers if not a.error and not a.series}
    found += [f"{title}: no series" for title in sorted(empty - allowed_empty.keys())]
    with_data = {a.query.panel for a in answers} - empty
    found += [
        f"{t}: allowed to be empty, has data" for t in sorted(with_data & allowed_empty.keys())
    ]
    return found
