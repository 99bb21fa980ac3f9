"""Per-tenant SLO counters add up across gateway pods: summed over two gateways, the
over-target fraction per tenant is the fleet's, whichever pod served which request."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_core.wire.metric_names import GATEWAY_TENANT_REQUESTS as TENANT_REQUESTS
from lorafleet_core.wire.metric_names import GATEWAY_TENANT_TTFT_OVER_TARGET as TENANT_OVER_TARGET
from tests.gateway.conftest import MSG_DEFAULT, start_env, stop_env


def scrape(url: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for s in family.samples:
            if s.name in (f"{TENANT_REQUESTS}_total", f"{TENANT_OVER_TARGET}_total"):
                out[(s.name, s.labels["tenant"])] = s.value
    return out


def test_tenant_counters_summed_over_two_gateways_give_the_fleet_over_target_fraction(
    tmp_path: Path,
):
    fast = start_env(tmp_path / "a", ttft_target_s=1.0)
    slow = start_env(tmp_path / "b", ttft_target_s=1.0)
    try:
        for replica in slow.replicas.values():
            replica.first_byte_delay = 1.2  # every request through gateway b misses the target
        sent = [(fast, "acme", 6), (slow, "acme", 4), (slow, "globex", 3), (fast, "globex", 1)]
        for env, tenant, n in sent:
            model = "acme/support:prod" if tenant == "acme" else "globex/bot:prod"
            for _ in range(n):
                stream = env.client(tenant).chat.completions.create(
                    model=model, messages=MSG_DEFAULT, stream=True
                )
                assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        totals: dict[tuple[str, str], float] = defaultdict(float)
        for env in (fast, slow):
            for key, value in scrape(env.internal_url).items():
                totals[key] += value
        fraction = {
            t: totals[(f"{TENANT_OVER_TARGET}_total", t)] / totals[(f"{TENANT_REQUESTS}_total", t)]
            for t in ("acme", "globex")
        }
        assert fraction == {"acme": 0.4, "globex": 0.75}
        # Neither pod alone sees it: gateway a says acme is fine, gateway b says it all misses.
        assert scrape(fast.internal_url)[(f"{TENANT_OVER_TARGET}_total", "acme")] == 0
    finally:
        stop_env(fast)
        stop_env(slow)
