"""The gateway's part of the chart: its two Services, its settings from values (catalog, limits,
routing, trusted proxies), its read-only Role, and how it survives disruptions."""

from __future__ import annotations

from typing import Any

import helm_python
import pytest

from tests.chart.chart_render import CHART, by_kind, deployment, render


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
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LORAFLEET_GATEWAY_CATALOG"] == "kubernetes"
    assert env["LORAFLEET_GATEWAY_NAMESPACE"] == "serving"


def test_the_per_tenant_concurrency_cap_reaches_the_gateway_and_zero_turns_it_off():
    def cap(docs: list[dict[str, Any]]) -> str:
        env = deployment(docs, "-gateway")["spec"]["template"]["spec"]["containers"][0]["env"]
        return str(
            {e["name"]: e.get("value") for e in env}["LORAFLEET_GATEWAY_MAX_CONCURRENT_REQUESTS"]
        )

    assert cap(render()) == "64"
    assert cap(render({"gateway": {"rateLimits": {"maxConcurrentRequests": 0}}})) == "0"
    with pytest.raises(Exception, match="maxConcurrentRequests"):
        render({"gateway": {"rateLimits": {"maxConcurrentRequests": -1}}})


def test_gateway_limits_are_set_from_values_and_reach_the_settings():
    from lorafleet_gateway.settings import GatewaySettings

    limits = {"maxTokens": 8192, "defaultMaxTokens": 512, "maxN": 8, "maxMessages": 64}
    memory = {
        "answerBufferBytes": 65536,
        "maxBufferedBodyBytesPerKey": 8 << 20,
        "maxBufferedBodyBytes": 32 << 20,
    }
    values = {"gateway": {"limits": {**limits, **memory, "maxBodyBytes": 4194304}}}
    (gateway,) = [
        d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
    ]
    container = gateway["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    settings = GatewaySettings.model_validate(
        {k.removeprefix("LORAFLEET_GATEWAY_").lower(): v for k, v in env.items()}
    )
    assert (settings.max_tokens_limit, settings.default_max_tokens) == (8192, 512)
    assert (settings.max_n, settings.max_messages, settings.max_body_bytes) == (8, 64, 4194304)
    assert settings.answer_buffer_bytes == 65536
    assert (settings.max_buffered_body_bytes_per_key, settings.max_buffered_body_bytes) == (
        8 << 20,
        32 << 20,
    )
    assert settings.drain_timeout_s == 120 - 5  # cut by the gateway before the kubelet kills


def test_gateway_routing_values_reach_the_router_settings():
    from lorafleet_gateway.runtime import thresholds_from_settings
    from lorafleet_gateway.settings import GatewaySettings

    def thresholds(values: dict[str, Any]) -> Any:
        (gateway,) = [
            d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
        ]
        container = gateway["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        return thresholds_from_settings(
            GatewaySettings.model_validate(
                {k.removeprefix("LORAFLEET_GATEWAY_").lower(): v for k, v in env.items()}
            )
        )

    assert thresholds_from_settings(GatewaySettings()) == thresholds({})  # same defaults
    routing = {"policy": "random", "balance": 2, "spill": "least_loaded"}
    routing |= {"maxTokensInFlight": 40000, "maxQueueDepth": 8}
    routing |= {"mergedMaxQueueDepth": 0, "mergedMaxTokensInFlight": 90000}
    t = thresholds({"gateway": {"routing": routing}})
    assert (t.policy, t.balance, t.spill) == ("random", 2.0, "least_loaded")
    assert (t.max_tokens_in_flight, t.max_queue_depth) == (40000, 8)
    assert (t.merged_max_queue_depth, t.merged_max_tokens_in_flight) == (0, 90000)


@pytest.mark.parametrize(
    "routing", [{"policy": "round_robin"}, {"spill": "anywhere"}, {"balance": -1}]
)
def test_bad_gateway_routing_values_are_refused(routing):
    with pytest.raises(helm_python.HelmError):
        helm_python.Chart.load(CHART).validate_schema({"gateway": {"routing": routing}})


def test_gateway_believes_forwarded_headers_only_from_the_configured_proxies(monkeypatch):
    from lorafleet_gateway.settings import GatewaySettings

    def gateway_env(values: dict[str, Any] | None) -> dict[str, str]:
        (gateway,) = [
            d for d in by_kind(render(values), "Deployment") if "gateway" in d["metadata"]["name"]
        ]
        container = gateway["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e["value"] for e in container["env"] if "value" in e}

    assert "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS" not in gateway_env(None)  # nobody's
    env = gateway_env({"gateway": {"forwardedAllowIps": "10.42.0.0/16"}})
    monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    monkeypatch.setenv(
        "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS", env["LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS"]
    )
    assert GatewaySettings().forwarded_allow_ips == "10.42.0.0/16"


def test_unknown_gateway_limit_is_refused():
    with pytest.raises(Exception, match=r"maxTokenz|additional"):
        helm_python.Chart.load(CHART).validate_schema({"gateway": {"limits": {"maxTokenz": 1}}})


def test_gateway_role_is_read_only():
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "Role")}
    verbs = {v for rule in roles["lf-lorafleet-gateway"]["rules"] for v in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}


def test_gateway_survives_disruptions_and_drains_on_shutdown():
    docs = render()
    (pdb,) = [p for p in by_kind(docs, "PodDisruptionBudget") if "gateway" in p["metadata"]["name"]]
    assert pdb["spec"]["maxUnavailable"] == 1
    (gw,) = [d for d in by_kind(docs, "Deployment") if "gateway" in d["metadata"]["name"]]
    pod = gw["spec"]["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    assert pod["terminationGracePeriodSeconds"] == 130
    # Readiness = can answer (lorafleet's JSON 503 when no replica), on the public port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
