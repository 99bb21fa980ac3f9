"""Rendering the chart offline for its tests: the values they use, `render`, `notes`, the CI
values files, validation of built-in kinds, and picking objects by kind."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import yaml

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
    "canary": {
        "enabled": True,
        "markers": {"canary/zebra:prod": "ZEBRA-7", "canary/owl:prod": "OWL-3"},
        "keySecret": {"name": "canary-key", "key": "api-key"},
    },
}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(CHART)
    rendered = chart.render(values or {}, name="lf", namespace="serving")
    docs: list[dict[str, Any]] = []
    for path, text in rendered.items():
        if not path.endswith("NOTES.txt"):
            docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(values: dict[str, Any] | None = None) -> str:
    rendered = helm_python.Chart.load(CHART).render(values or {}, name="lf", namespace="serving")
    text: str = next(t for path, t in rendered.items() if path.endswith("NOTES.txt"))
    return text


CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))


def ci_values(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "ci" / name).read_text())
    return loaded


def validate_builtin(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kubernetes-validate (strict) every built-in kind; returns the others."""
    others = []
    for doc in docs:
        group = doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else ""
        if group in (
            "",
            "apps",
            "batch",
            "rbac.authorization.k8s.io",
            "networking.k8s.io",
            "policy",
        ):
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        else:
            others.append(doc)
    return others


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def deployment(docs: list[dict[str, Any]], part: str) -> dict[str, Any]:
    (found,) = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith(part)]
    return found


def rule_groups() -> list[dict[str, Any]]:
    """The groups of the chart's PrometheusRule (alerts and recording rules), rendered."""
    (rule,) = by_kind(render(ALL_ON), "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def monitoring_exprs() -> list[str]:
    """Every PromQL expression the chart ships: the dashboard's panels and annotations, and
    the rules."""
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    (rule,) = by_kind(render(ALL_ON), "PrometheusRule")
    annotations = [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    return (
        [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
        + annotations
        + [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    )


def engine_series_queried() -> set[str]:
    """The vLLM series (`vllm:` names) the dashboard and alerts read; a test against real vLLM
    checks each comes through the agent (tests/agent/test_agent_vllm.py)."""
    return set(re.findall(r"vllm:[a-z_]+", " ".join(monitoring_exprs())))
