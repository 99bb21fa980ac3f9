"""FleetSync (the coalescing writer) with a recording writer: batching and no-op skipping."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS, LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_operator.fleet_index import MISSED_SCRAPES_KEPT
from lorafleet_operator.sync import FleetSync
from tests.operator.factories import adapter_body, alias_body, pool
from tests.waiting import eventually_async


class RecordingWriter:
    def __init__(self) -> None:
        self.pods: Counter[str] = Counter()
        self.pod_values: dict[str, str] = {}
        self.adapters: Counter[str] = Counter()
        self.aliases: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.warnings: list[tuple[str, str, str]] = []
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.deleted: list[str] = []

    async def pod_annotation(self, namespace: str, pod: str, value: str) -> None:
        await asyncio.sleep(0)
        self.pods[pod] += 1
        self.pod_values[pod] = value

    async def adapter_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.adapters[name] += 1

    async def alias_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.aliases[name] = status

    async def event(self, namespace, kind, name, uid, reason, message, type_="Normal") -> None:
        if type_ == "Warning":
            self.warnings.append((kind, name, reason))
        else:
            self.events.append((name, reason, message))

    async def create_pool(self, namespace: str, body: dict[str, Any]) -> None:
        self.created.append(body)

    async def patch_pool(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched.append((name, patch))

    async def delete_pool(self, namespace: str, name: str) -> None:
        self.deleted.append(name)


def pod_body(name: str, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {LABEL_POOL: "pool", LABEL_COMPONENT: "replica"},
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


@pytest.fixture
async def fleet():
    writer = RecordingWriter()
    fleet = FleetSync("ns", writer, debounce=0.2, max_delay=1.0)
    task = asyncio.create_task(fleet.run())
    yield fleet, writer
    task.cancel()


async def test_bulk_create_patches_each_pod_a_handful_of_times(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    for i in range(26):
        fleet.index.upsert_pod(pod_body(f"pool-{i}"))
    # 5,000 adapters arrive as a watch stream would deliver them: in bursts, over ~2 s.
    for chunk in range(50):
        for i in range(100):
            fleet.index.upsert_adapter(adapter_body(f"bulk-{chunk * 100 + i:04d}"))
        await asyncio.sleep(0.04)
    await fleet.flush()
    assert sum(writer.adapters.values()) >= 5000
    assert max(writer.adapters.values()) <= 2  # Pending->Ready at most, never per event
    assert len(writer.pods) == 26
    assert max(writer.pods.values()) <= 6, writer.pods
    # An unchanged world writes nothing.
    before = (sum(writer.pods.values()), sum(writer.adapters.values()))
    await fleet.flush()
    assert (sum(writer.pods.values()), sum(writer.adapters.values())) == before


async def test_replica_churn_rewrites_only_affected_pods(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    for i in range(10):
        fleet.index.upsert_pod(pod_body(f"pool-{i}"))
    for i in range(300):
        fleet.index.upsert_adapter(adapter_body(f"a-{i:03d}"))
    await fleet.flush()
    writer.pods.clear()
    fleet.index.upsert_pod(pod_body("pool-10"))  # a replica joins
    await fleet.flush()
    changed = set(writer.pods)
    assert "pool-10" in changed
    # ~2/11 of the adapters move to the newcomer, taken from (nearly) every pod: each pod that
    # lost an adapter is rewritten once; none twice.
    assert max(writer.pods.values()) == 1
    writer.pods.clear()
    fleet.index.remove_pod("pool-3")  # a replica leaves
    await fleet.flush()
    assert "pool-3" not in writer.pods
    assert writer.pods
    assert max(writer.pods.values()) == 1


async def test_alias_deploy_posts_an_event_once(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    fleet.index.upsert_pod(pod_body("pool-0"))
    fleet.index.upsert_adapter(adapter_body("v1"))
    fleet.index.upsert_alias(alias_body("prod", "acme/s:prod", "v1"))
    await fleet.flush()
    assert writer.aliases["prod"]["adapter"] == "v1"
    assert [(n, r) for n, r, _ in writer.events] == [("prod", "Deployed")]
    await fleet.flush()
    assert len(writer.events) == 1


async def test_flush_waits_for_a_pass_that_started_after_it(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    fleet.index.upsert_pod(pod_body("pool-0"))
    fleet.index.upsert_adapter(adapter_body("x"))
    await fleet.flush()
    assert "x" in writer.pod_values["pool-0"]
    fleet.index.upsert_adapter(
        adapter_body("x") | {"metadata": {"name": "x", "deletionTimestamp": "t"}}
    )
    await fleet.flush()
    assert writer.pod_values["pool-0"] == "[]"


async def test_failures_post_one_warning_event_each_and_passes_repeat_none(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    for i in range(2):
        fleet.index.upsert_pod(pod_body(f"pool-{i}"))
    fleet.index.upsert_adapter(adapter_body("good"))
    fleet.index.upsert_adapter(adapter_body("big", rank=128))
    fleet.index.upsert_alias(alias_body("prod", "acme/s:prod", "good"))
    await fleet.flush()
    await fleet.flush()
    assert writer.warnings == [("LoRAAdapter", "big", "RankTooHigh")]
    edited = alias_body("prod", "acme/s:prod", "big")  # a refused deploy
    edited["status"] = writer.aliases["prod"]  # a watch event carries the status written
    fleet.index.upsert_alias(edited)
    await fleet.flush()
    assert writer.warnings[1:] == [("AdapterAlias", "prod", "AdapterNotReady")]
    fleet.index.remove_adapter("good")  # what it serves vanishes
    await fleet.flush()
    assert writer.warnings[2:] == [("AdapterAlias", "prod", "AdapterNotFound")]
    for _ in range(3):
        await fleet.flush()
    assert len(writer.warnings) == 3  # transitions only, never once per pass


async def test_a_waiting_deploy_is_planned_again_at_its_deadline_without_any_event(fleet):
    """No scrape answers and nothing changes: the loop still plans again when the deploy's
    progress deadline falls, so it is reported stalled (one Warning Event)."""
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    fleet.index.upsert_pod(pod_body("pool-0"))
    for v in ("v1", "v2"):
        fleet.index.upsert_adapter(adapter_body(v))
    fleet.index.upsert_alias(alias_body("prod", "acme/s:prod", "v1"))
    await fleet.flush()
    assert writer.aliases["prod"]["adapter"] == "v1"
    edited = alias_body("prod", "acme/s:prod", "v2")
    edited["spec"]["progressDeadlineSeconds"] = 1
    edited["status"] = writer.aliases["prod"]
    fleet.index.upsert_alias(edited)
    await fleet.flush()

    def deployed_reason() -> str:
        conds = writer.aliases["prod"].get("conditions") or []
        return str(next(c["reason"] for c in conds if c["type"] == "Deployed"))

    assert deployed_reason() == "AwaitingReplicas"
    await eventually_async(lambda: writer.warnings, within_s=10)  # posted after the status
    assert writer.warnings == [("AdapterAlias", "prod", "ProgressDeadlineExceeded")]
    assert deployed_reason() == "ProgressDeadlineExceeded"
    assert writer.aliases["prod"]["adapter"] == "v1"


async def test_a_replica_missing_a_scrape_keeps_its_traffic_until_it_stays_silent(fleet):
    fleet, writer = fleet
    fleet.index.upsert_pool(pool())
    for i in range(4):
        fleet.index.upsert_pod(pod_body(f"pool-{i}"))
    fleet.index.upsert_adapter(adapter_body("hot"))
    busy = ReplicaState(replica_id="pool-0", tokens_per_second={"hot": 2000.0})

    async def scraped(states: dict[str, ReplicaState]) -> int:
        fleet.index.set_states("pool", states)
        await fleet.flush()
        assert fleet.last_plan is not None
        count = fleet.last_plan.adapter_status["hot"].owner_count
        assert count is not None
        return int(count)

    assert await scraped({"pool-0": busy}) == 4  # hot: every replica owns it
    writes = writer.adapters["hot"]
    # pool-0 misses MISSED_SCRAPES_KEPT scrapes (late answers): its traffic still counts.
    for _ in range(MISSED_SCRAPES_KEPT):
        assert await scraped({}) == 4
    assert writer.adapters["hot"] == writes  # nothing rewritten meanwhile
    assert await scraped({"pool-0": busy}) == 4  # it answers again: the count starts over
    for _ in range(MISSED_SCRAPES_KEPT):
        assert await scraped({}) == 4
    # Silent once more: it is no longer heard, so its traffic is gone (back to the default).
    assert await scraped({}) == 2
    # A replica that stops being ready is forgotten at its pool's next scrape.
    assert await scraped({"pool-0": busy}) == 4
    fleet.index.upsert_pod(pod_body("pool-0", ready=False))
    assert await scraped({}) == 2


async def test_a_restarted_operator_rewrites_nothing_before_and_after_its_first_scrape():
    # A pool whose pods own more than their annotation holds (the kept set follows traffic)
    # and a hot adapter with more owners than the default: what the traffic decided must
    # survive a restart whose first passes run before any replica has answered a scrape.
    small = pool(cache={"ownedAnnotationMaxBytes": 4096})
    pods = [f"pool-{i}" for i in range(3)]
    traffic = {f"a-{i:02d}": 20.0 * (i + 1) for i in range(40)} | {"a-00": 2000.0}
    states = {
        r: ReplicaState(replica_id=r, tokens_per_second=dict(traffic) if r == "pool-0" else {})
        for r in pods
    }
    first_writer = RecordingWriter()
    first = FleetSync("ns", first_writer, debounce=0.05, max_delay=0.5)
    task = asyncio.create_task(first.run())
    try:
        first.index.upsert_pool(small)
        for r in pods:
            first.index.upsert_pod(pod_body(r))
        for name in traffic:
            first.index.upsert_adapter(adapter_body(name))
        first.index.set_states("pool", states)
        await first.flush()
        await first.flush()  # settled: the second pass writes nothing
    finally:
        task.cancel()
    assert first.last_plan is not None
    assert first.last_plan.dropped, "the pods must own more than their annotation holds"
    assert first.index.adapters["a-00"].status is not None
    assert first.index.adapters["a-00"].status.owner_count == 3

    # The restarted operator lists what the first one left: annotations and statuses.
    writer = RecordingWriter()
    second = FleetSync("ns", writer, debounce=0.05, max_delay=0.5)
    task = asyncio.create_task(second.run())
    try:
        second.index.upsert_pool(small)
        for r in pods:
            body = pod_body(r)
            value = first.index.pod_values[r]
            assert value is not None
            body["metadata"]["annotations"] = {ANNOTATION_OWNED_ADAPTERS: value}
            second.index.upsert_pod(body)
        for name, entry in first.index.adapters.items():
            assert entry.status is not None
            second.index.upsert_adapter(adapter_body(name) | {"status": entry.status.wire()})
        await second.flush()  # before any scrape: traffic unknown
        assert (writer.pods, writer.adapters) == (Counter(), Counter())
        second.index.set_states("pool", states)  # the first scrape: the same traffic
        await second.flush()
        assert (writer.pods, writer.adapters) == (Counter(), Counter())
    finally:
        task.cancel()
