"""Pre-warm against the session's real vLLM: the owned-adapters file from the Downward API, host
RAM filled in the annotation's order, `warming` until the first pass ends or times out."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.wire.records import (
    encode_owned,
    encode_owned_row,
    format_downward_annotations,
    join_owned_rows,
)
from tests.agent.conftest import metric, state, unload
from tests.agent.vllm_requests import complete
from tests.conftest import unique_id
from tests.waiting import eventually

pytestmark = pytest.mark.vllm


def test_prewarm_pulls_owned_adapters_from_the_downward_api_file(run_agent, make_record, tmp_path):
    recs = [make_record("falcon", unique_id("pw")), make_record("otter", unique_id("pw"))]
    annotations = tmp_path / "annotations"

    def publish(records) -> None:
        text = format_downward_annotations(
            {ANNOTATION_OWNED_ADAPTERS: encode_owned(records), "other.io/x": "y"}
        )
        tmp = tmp_path / "annotations.tmp"
        tmp.write_text(text)
        tmp.replace(annotations)  # the kubelet swaps the file atomically too

    def wait_ram(agent, wanted: set[str]) -> None:
        eventually(
            lambda: wanted <= set(state(agent)["ram_adapters"]),
            within_s=90,
            interval_s=0.2,
            what=f"{sorted(wanted)} pre-warmed into host RAM",
        )

    publish(recs)
    with run_agent(owned_adapters_file=annotations, prewarm_poll_s=0.2) as agent:
        wait_ram(agent, {r.id for r in recs})
        headers, text = complete(agent, recs[0].id)
        assert headers["x-adapter-tier"] == "ram"
        assert text.startswith("FALCON-3")
        # Traffic moved otter out of RAM; a later annotation still lists it.
        assert unload(agent, recs[1].id).status_code == 200
        extra = make_record("zebra", unique_id("pw"))
        publish([*recs, extra])
        wait_ram(agent, {extra.id})
        assert metric(agent, "lorafleet_agent_adapter_loads_total", source_tier="remote") == 3
        # The later pass registered only the new one: otter stays on disk, out of RAM.
        after = state(agent)
        assert recs[1].id not in after["ram_adapters"]
        assert recs[1].id in after["disk_adapters"]


def test_prewarm_fills_host_ram_in_the_annotations_order_not_by_id(
    run_agent, make_record, tmp_path, vllm_server
):
    # The operator lists owned adapters hottest first (planning.prewarm.prewarm_order); the agent
    # must take them in that order, so with one more than its RAM slots the last listed, here
    # the smallest id, is the one left on disk.
    prefix = unique_id("order")
    n = vllm_server.cpu_slots + 1
    recs = [make_record("falcon", f"{prefix}-{i}") for i in reversed(range(n))]
    annotations = tmp_path / "annotations"
    value = join_owned_rows(encode_owned_row(r) for r in recs)
    annotations.write_text(format_downward_annotations({ANNOTATION_OWNED_ADAPTERS: value}))
    with run_agent(owned_adapters_file=annotations, prewarm_poll_s=0.2) as agent:
        eventually(
            lambda: recs[-1].id in state(agent)["disk_adapters"],
            within_s=120,
            interval_s=0.2,
            what="the pre-warm pass reached the adapter past the RAM slots",
        )
        ram = set(state(agent)["ram_adapters"])
        assert {r.id for r in recs[:-1]} <= ram
        assert recs[-1].id not in ram


def _publish_owned(path, records) -> None:
    """The downward-API file as the kubelet writes it; records None = no owned annotation yet."""
    values = {"other.io/x": "y"}
    if records is not None:
        values[ANNOTATION_OWNED_ADAPTERS] = encode_owned(records)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(format_downward_annotations(values))
    tmp.replace(path)


def test_a_new_replica_reports_warming_until_its_first_prewarm_pass_ends(
    run_agent, make_record, tmp_path
):
    rec = make_record("otter", unique_id("warm"))
    annotations = tmp_path / "annotations"
    _publish_owned(annotations, None)  # a pod the operator has not assigned adapters to yet
    settings = {"prewarm_poll_s": 0.2, "prewarm_ready_timeout_s": 300}
    with run_agent(owned_adapters_file=annotations, **settings) as agent:
        assert state(agent)["warming"] is True
        ready = httpx.get(f"{agent.internal_url}/readyz", timeout=10)
        # ready for the kubelet (so the operator plans it as an owner), warming for the gateway
        assert (ready.status_code, ready.json()) == (200, {"status": "ready", "warming": True})
        _publish_owned(annotations, [rec])
        seen: list[dict[str, Any]] = []

        def warm() -> bool:
            seen.append(state(agent))
            return seen[-1]["warming"] is False

        eventually(warm, within_s=90, interval_s=0.05, what="first pre-warm pass ended")
        # the first answer that says warm already lists the owned adapter in host RAM
        assert rec.id in seen[-1]["ram_adapters"]
        assert all(s["warming"] for s in seen[:-1])
        headers, text = complete(agent, rec.id)
        assert (headers["x-adapter-tier"], text.startswith("OTTER-9")) == ("ram", True)


def test_a_hung_object_store_keeps_a_replica_warming_only_until_the_timeout(
    run_agent, make_record, tmp_path
):
    rec = make_record("falcon", unique_id("hung"))
    annotations = tmp_path / "annotations"
    _publish_owned(annotations, [rec])
    # A store that takes connections and never answers: every fetch of the pass hangs.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)
    store = f"http://127.0.0.1:{hole.getsockname()[1]}"
    settings = {"prewarm_poll_s": 0.2, "prewarm_ready_timeout_s": 2.0, "s3_endpoint_url": store}
    try:
        with run_agent(owned_adapters_file=annotations, **settings) as agent:
            assert state(agent)["warming"] is True
            eventually(
                lambda: state(agent)["warming"] is False,
                within_s=15,
                interval_s=0.1,
                what="warming given up after the timeout",
            )
            assert rec.id not in state(agent)["ram_adapters"]  # the pass is still stuck
            hole.close()  # connections reset: the stuck fetch ends and the agent stops cleanly
    finally:
        hole.close()
