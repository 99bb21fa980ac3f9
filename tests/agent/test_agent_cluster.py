"""A cluster agent in front of the session's real vLLM, against the emulated API server.

`internal_auth=tokenReview` with `kube_events`: the gateway's ServiceAccount token loads an
adapter that then serves; the Secret's shared token no longer does; a second, different record
for the held id is refused with 409 each time, counted, logged, and posted as one Warning Event
on the LoRAAdapter whose count follows the repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from lorafleet_core.wire.records import AdapterRecord
from tests.agent.conftest import metric
from tests.agent.kube_emulation import (
    AUDIENCE,
    GATEWAY_SA,
    OPERATOR_SA,
    TokenReviews,
    emulated_cluster,
)
from tests.agent_thread import RunningAgent
from tests.conftest import INTERNAL_HEADERS, TEST_DATA_TOKEN, unique_id
from tests.operator.kmock_cluster import Cluster, eventually

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def kube() -> Iterator[tuple[Cluster, TokenReviews]]:
    yield from emulated_cluster()


def post_load(
    agent: RunningAgent, record: AdapterRecord, headers: dict[str, str]
) -> httpx.Response:
    return httpx.post(
        f"{agent.internal_url}/internal/replicas/r0/adapters/{record.id}/load",
        json={"record": record.model_dump(mode="json"), "gpu": False},
        headers=headers,
        timeout=120,
    )


def conflict_events(cluster: Cluster, adapter_id: str) -> list[dict[str, Any]]:
    items = cluster.items(cluster.path("events", group="v1"))
    return [
        e
        for e in items
        if e["involvedObject"]["name"] == adapter_id and e["reason"] == "RecordConflict"
    ]


def test_a_service_account_token_loads_and_a_conflict_becomes_one_growing_event(
    run_agent, make_record, s3_server, kube, caplog
):
    cluster, reviews = kube
    rec = make_record("zebra", unique_id("sa"))
    cluster.create(
        cluster.path("loraadapters"),
        {"apiVersion": "lorafleet.dev/v1alpha1", "kind": "LoRAAdapter",
         "metadata": {"name": rec.id}},
    )  # fmt: skip
    squatter = make_record(
        "otter", rec.id, weights_uri=s3_server.uris["otter"], checksum="sha256:" + "1" * 64
    )
    gateway = {"authorization": "Bearer gateway-token"}
    with run_agent(
        internal_auth="tokenReview",
        internal_audience=AUDIENCE,
        internal_service_accounts=f"{GATEWAY_SA},{OPERATOR_SA}",
        kube_api_server=cluster.url,
        kube_events=True,
        kube_event_interval_s=0.3,
        pod_namespace=cluster.namespace,
    ) as agent:
        # The shared Secret token is not a credential in tokenReview mode.
        assert post_load(agent, rec, INTERNAL_HEADERS).status_code == 401
        assert post_load(agent, rec, {"authorization": "Bearer stranger-token"}).status_code == 401
        loaded = post_load(agent, rec, gateway)
        assert loaded.status_code == 200, loaded.text
        oai = openai.OpenAI(base_url=f"{agent.data_url}/v1", api_key=TEST_DATA_TOKEN, max_retries=0)
        out = oai.completions.create(model=rec.id, prompt="hello", max_tokens=8, temperature=0)
        assert out.choices[0].text.startswith("ZEBRA-7")

        with caplog.at_level(logging.ERROR, logger="lorafleet_agent.held_records"):
            for _ in range(3):
                r = post_load(agent, squatter, gateway)
                assert r.status_code == 409
                assert r.json()["error"]["code"] == "record_conflict"
        assert metric(agent, "lorafleet_agent_record_conflicts_total") == 3
        refusals = [
            m for m in caplog.records if m.levelno == logging.ERROR and rec.id in m.msg % m.args
        ]
        assert len(refusals) == 3
        (event,) = eventually(
            lambda: [e for e in conflict_events(cluster, rec.id) if e["count"] == 3]
        )
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "LoRAAdapter"
        assert "1" * 64 not in event["message"]
        assert len(conflict_events(cluster, rec.id)) == 1
        # The held record keeps serving; one review for all those calls (the cache).
        assert post_load(agent, rec, gateway).status_code == 200
        assert reviews.count("gateway-token") == 1
