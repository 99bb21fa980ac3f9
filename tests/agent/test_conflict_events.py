"""Record conflicts as Kubernetes Events, against the emulated API server (kmock).

The agent's ConflictEvents is the code under test: what it posts, on which object, and that
repeats grow one Event's count instead of storming the API server. The full path (a refused
load on a real agent in front of vLLM posting the Event) is in test_agent_cluster.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from lorafleet_agent.conflict_events import ConflictEvents
from lorafleet_agent.kube import AgentKube
from lorafleet_core.wire.records import AdapterRecord
from tests.agent.kube_emulation import emulated_cluster
from tests.operator.kmock_cluster import Cluster
from tests.waiting import eventually_async

pytestmark = pytest.mark.timeout(60)

HELD = "sha256:" + "a" * 64
OFFERED = "sha256:" + "b" * 64


def record(adapter_id: str, checksum: str) -> AdapterRecord:
    return AdapterRecord(
        id=adapter_id,
        tenant="acme",
        base_model_hash="sha256:" + "0" * 64,
        rank=8,
        alpha=16,
        target_modules=("q_proj", "v_proj"),
        weights_uri=f"s3://bucket/{adapter_id}/",
        checksum=checksum,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    for c, _ in emulated_cluster():
        yield c


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[AgentKube]:
    k = AgentKube(cluster.url)
    yield k
    await k.aclose()


def events(cluster: Cluster, involved_name: str) -> list[dict[str, Any]]:
    items = cluster.items(cluster.path("events", group="v1"))
    return [e for e in items if e["involvedObject"]["name"] == involved_name]


def lora_adapter(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.create(
        cluster.path("loraadapters"),
        {"apiVersion": "lorafleet.dev/v1alpha1", "kind": "LoRAAdapter", "metadata": {"name": name}},
    )


def reporter(kube: AgentKube, cluster: Cluster, interval_s: float = 0.3) -> ConflictEvents:
    return ConflictEvents(
        kube.api, namespace=cluster.namespace, replica_id="r0", pod_uid="pod-uid-r0",
        interval_s=interval_s,
    )  # fmt: skip


async def test_a_conflict_is_a_warning_event_on_the_lora_adapter_without_full_checksums(
    cluster, kube
):
    uid = lora_adapter(cluster, "acme-v1")["metadata"]["uid"]
    ev = reporter(kube, cluster)
    ev.report(record("acme-v1", HELD), record("acme-v1", OFFERED))
    (event,) = await eventually_async(lambda: events(cluster, "acme-v1"))
    assert event["reason"] == "RecordConflict"
    assert event["type"] == "Warning"
    assert event["count"] == 1
    assert event["involvedObject"] == {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "name": "acme-v1",
        "namespace": cluster.namespace,
        "uid": uid,
    }
    message = event["message"]
    assert "r0" in message
    assert "acme-v1" in message
    assert "sha256:aaaaaaaaaaaa" in message
    assert "sha256:bbbbbbbbbbbb" in message
    assert HELD not in message
    assert OFFERED not in message
    assert event["source"]["component"] == "lorafleet-agent"


async def test_repeats_grow_one_events_count_with_few_writes(cluster, kube):
    lora_adapter(cluster, "acme-v2")
    ev = reporter(kube, cluster, interval_s=0.3)
    held, offered = record("acme-v2", HELD), record("acme-v2", OFFERED)
    ev.report(held, offered)
    await eventually_async(lambda: events(cluster, "acme-v2"))
    writes_after_first = ev.writes
    for _ in range(20):  # a caller hammering the conflict
        ev.report(held, offered)
    await eventually_async(lambda: [e for e in events(cluster, "acme-v2") if e["count"] == 21])
    assert len(events(cluster, "acme-v2")) == 1  # one Event, not 21
    # 20 repeats within one interval: a single patch of the count (no event storm).
    assert ev.writes - writes_after_first == 1
    # A different conflict for the same id is its own Event.
    ev.report(held, record("acme-v2", "sha256:" + "c" * 64))
    await eventually_async(lambda: len(events(cluster, "acme-v2")) == 2)


async def test_a_restarted_agent_continues_the_same_events_count(cluster, kube):
    lora_adapter(cluster, "acme-v3")
    held, offered = record("acme-v3", HELD), record("acme-v3", OFFERED)
    first = reporter(kube, cluster)
    for _ in range(3):
        first.report(held, offered)
    await eventually_async(lambda: [e for e in events(cluster, "acme-v3") if e["count"] == 3])
    again = reporter(kube, cluster)  # a new agent life: nothing tracked yet
    again.report(held, offered)
    await eventually_async(lambda: [e for e in events(cluster, "acme-v3") if e["count"] == 4])
    assert len(events(cluster, "acme-v3")) == 1


async def test_an_id_the_registry_never_had_is_reported_on_the_pod(cluster, kube):
    ev = reporter(kube, cluster)
    ev.report(record("ghost-v1", HELD), record("ghost-v1", OFFERED))
    (event,) = await eventually_async(lambda: events(cluster, "r0"))
    assert event["involvedObject"]["kind"] == "Pod"
    assert event["involvedObject"]["uid"] == "pod-uid-r0"
    assert "ghost-v1" in event["message"]


async def test_the_api_server_down_drops_the_event_and_never_raises(caplog):
    down = AgentKube("http://127.0.0.1:9")  # nothing listens on the discard port
    ev = ConflictEvents(down.api, namespace="lfa", replica_id="r0", pod_uid=None)
    try:
        ev.report(record("x-v1", HELD), record("x-v1", OFFERED))
        await eventually_async(lambda: "could not post a RecordConflict Event" in caplog.text)
    finally:
        await down.aclose()
