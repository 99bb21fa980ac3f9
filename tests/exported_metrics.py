"""The Prometheus metrics lorafleet exports: one list for every test that checks a name
against them (the docs, the chart's dashboard and alerts)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_agent.metrics import AgentMetrics
from lorafleet_gateway.metrics import GatewayMetrics
from lorafleet_loadtest.probe.canary import AliasTally, prometheus_textfile
from lorafleet_operator.metrics import OperatorMetrics

SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}


def agent_metrics() -> AgentMetrics:
    """The agent's registry with its opt-in families on (the residency info), as documented."""
    agent = AgentMetrics()
    agent.residency.info = True
    return agent


def exported_families() -> dict[str, str]:
    """Family name -> type: the agent's, the gateway's and the operator's registries, and the
    canary probe's textfile."""
    families: dict[str, str] = {}
    registries: list[CollectorRegistry] = [
        agent_metrics().registry,
        GatewayMetrics().registry,
        OperatorMetrics(dict).registry,
    ]
    for registry in registries:
        families |= {f.name: f.type for f in registry.collect()}
    tally = AliasTally(hits=1, ttfts=[0.1], answered={"adapter": 1})
    text = prometheus_textfile({"acme/bot:prod": tally}, 0, 0.0)
    families |= {f.name: f.type for f in text_string_to_metric_families(text)}
    return families


def series_names(families: dict[str, str]) -> set[str]:
    """What a query can select: a gauge's name, a counter's `_total`, a histogram's `_bucket`,
    `_sum` and `_count` (no `_created`: lorafleet_core.web.exposition)."""
    names: set[str] = set()
    for name, kind in families.items():
        suffixes = SAMPLE_SUFFIXES.get(kind)
        names |= {name + s for s in suffixes} if suffixes else {name}
    return names
