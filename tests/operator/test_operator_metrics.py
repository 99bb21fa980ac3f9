"""The operator's /metrics over real HTTP: pass durations, writes, adapters by phase, refused
deploys, read from a FleetSync that planned a small namespace."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_operator import runtime
from lorafleet_operator.sync import FleetSync
from tests.operator.factories import adapter_body, alias_body, pool
from tests.operator.test_operator_sync import RecordingWriter, pod_body
from tests.scrape import Scrape


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture
async def operator_runtime(monkeypatch):
    monkeypatch.setenv("LORAFLEET_OPERATOR_METRICS_PORT", "0")
    rt = runtime.Runtime()
    port = rt.serve_metrics()
    assert port
    yield rt, port
    await rt.close()


async def test_metrics_report_passes_writes_phases_and_refused_deploys(operator_runtime):
    rt, port = operator_runtime
    writer = rt.metrics.counting(RecordingWriter())
    fleet = FleetSync("ns", writer, debounce=0.05, max_delay=0.2, on_pass=rt.metrics.on_pass("ns"))
    rt.fleets["ns"] = fleet
    task = asyncio.create_task(fleet.run())
    try:
        fleet.index.upsert_pool(pool())
        for i in range(2):
            fleet.index.upsert_pod(pod_body(f"pool-{i}"))
        fleet.index.upsert_adapter(adapter_body("acme-v1"))
        fleet.index.upsert_adapter(adapter_body("acme-huge", rank=64))  # above maxRank: Rejected
        fleet.index.upsert_alias(alias_body("prod", "acme/support:prod", "acme-huge"))
        await fleet.flush()
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
    finally:
        task.cancel()
    assert response.status_code == 200
    got = samples(response.text)
    ns = ("namespace", "ns")
    assert got[("lorafleet_operator_adapters", (ns, ("phase", "Ready")))] == 1
    assert got[("lorafleet_operator_adapters", (ns, ("phase", "Rejected")))] == 1
    assert got[("lorafleet_operator_adapters", (ns, ("phase", "Failed")))] == 0
    assert got[("lorafleet_operator_aliases_deploy_refused", (ns,))] == 1
    assert got[("lorafleet_operator_writes_total", (("kind", "adapter"), ns))] >= 2
    assert got[("lorafleet_operator_writes_total", (("kind", "pod"), ns))] >= 1
    assert got[("lorafleet_operator_write_failures_total", (ns,))] == 0
    passes = got[("lorafleet_operator_sync_passes_total", (ns,))]
    ok_passes = got[("lorafleet_operator_sync_pass_seconds_count", (ns, ("result", "ok")))]
    assert passes >= 1
    assert [v for (name, _), v in got.items() if name == "lorafleet_operator_build_info"] == [1]
    assert ok_passes >= 1


async def test_a_failing_pass_is_counted_as_an_error(operator_runtime):
    rt, _ = operator_runtime

    fleet = FleetSync("ns", RecordingWriter(), debounce=0.05, max_delay=0.2)
    fleet.on_pass = rt.metrics.on_pass("ns")
    fleet.index.upsert_pool(pool())
    fleet.index.upsert_adapter(adapter_body("acme-v1"))

    async def broken_plan() -> None:
        raise RuntimeError("planner bug")

    fleet.sync_once = broken_plan  # type: ignore[method-assign,assignment]
    task = asyncio.create_task(fleet.run())
    try:
        await fleet.flush()  # returns when the (failed) pass is over
    finally:
        task.cancel()
    assert _count(rt, "error") >= 1
    assert _count(rt, "ok") == 0


def _count(rt: runtime.Runtime, result: str) -> float:
    return Scrape.of_registry(rt.metrics.registry).value(
        "lorafleet_operator_sync_pass_seconds_count", namespace="ns", result=result
    )
