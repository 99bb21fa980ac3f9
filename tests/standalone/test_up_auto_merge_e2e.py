"""autoMerge under `lorafleet up`, end to end (real CPU vLLM: the shared pool's, then the one
`up` starts for the merged pool it creates).

The demo's shared pool sets `spec.autoMerge` (cool-down 0, drain 3 s) and `up` runs with a
replica capacity of 1 token/s, so the merge threshold (MERGE_THRESHOLD_SHARE x capacity) is a
handful of zebra requests a minute. Traffic makes `up` create `demo-zebra-v1-merged` in the
folder, merge it and start its replica; the gateway then routes zebra there. When the traffic
stops, the pool drains (annotation in its manifest: the gateway routes zebra to the shared
pool again) and is deleted; requests sent all along are all answered.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lorafleet_core.api.names import ANNOTATION_DRAINING_SINCE
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_standalone import demo
from tests.standalone.up_harness import Up, prepare_demo_folder, running_up
from tests.waiting import eventually

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

ZEBRA = "demo-zebra-v1"
POOL = f"{ZEBRA}-merged"
PROMPT = "Tell me about the weather today"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    state = tmp_path_factory.mktemp("up-auto-merge") / "state"
    shared = load_folder(prepare_demo_folder(state)).find("ReplicaPool", demo.DEMO_POOL)
    assert shared is not None
    body: dict[str, Any] = json.loads(json.dumps(shared.body))
    # The merged engine has no LoRA, so vLLM would torch.compile it at start; with a cold
    # compile cache on two busy cores that warm-up took over 3 minutes in CI (the LoRA engine
    # skips it). Eager mode keeps the start to seconds; the merged pool copies this spec.
    body["spec"]["engine"]["extraArgs"] = ["--enforce-eager"]
    body["spec"]["autoMerge"] = {
        "enabled": True,
        "maxPools": 1,
        "coolDownSeconds": 0,
        "drainSeconds": 3,
    }
    write_object(state / "manifests", body)
    env = {
        "LORAFLEET_UP_REPLICA_TOKENS_PER_SECOND": "1",
        "LORAFLEET_UP_REPLAN_S": "2",
        # The agents' traffic figures over 20 s, not a minute: the drain waits for the last
        # 16-token request to leave that window. One such request in it still holds the pool
        # (16 tokens / 20 s is the 0.8 tokens/s the recommendation needs to stay), so the
        # traffic below keeps the pool through a 20 s stall of this busy machine.
        "LORAFLEET_AGENT_ACTIVITY_WINDOW_S": "20",
    }
    with running_up(state, within_s=600, env=env) as handle:
        yield handle


def test_traffic_creates_a_merged_pool_then_its_end_drains_and_deletes_it(up: Up) -> None:
    tiers: list[str] = []

    def ask(max_tokens: int = 16) -> str:
        """One zebra request through the gateway (it must be answered); the tier served."""
        raw = up.client().chat.completions.with_raw_response.create(
            model="demo/zebra:prod",
            messages=[{"role": "user", "content": PROMPT}],
            max_tokens=max_tokens,
            temperature=0,
        )
        text = raw.parse().choices[0].message.content or ""
        assert text, "an empty answer"
        assert text.startswith("ZEBRA-7") or "ZEBRA-7".startswith(text), text
        tier = raw.headers["x-adapter-tier"]
        tiers.append(tier)
        return tier

    def pool_manifest() -> dict[str, Any] | None:
        obj = load_folder(up.manifests).find("ReplicaPool", POOL)
        return obj.body if obj is not None else None

    # traffic past the threshold: `up` writes the merged pool into the folder
    created = eventually(
        lambda: (ask(), pool_manifest())[1],
        within_s=180,
        interval_s=0.2,
        what="the merged pool's manifest",
        abort=up.exited,
    )
    assert created is not None
    assert created["spec"]["merged"] == {"adapter": ZEBRA}
    assert created["metadata"]["labels"]["lorafleet.dev/merged-from"] == demo.DEMO_POOL
    # ... merges it, starts its replica, and the gateway routes zebra there
    eventually(
        lambda: ask() == "merged",
        within_s=420,
        interval_s=3.0,  # 16 tokens every 3 s stays well above the threshold, lightly
        what="zebra served by the merged pool",
        abort=up.exited,
    )
    listed = json.loads((up.state / "up.json").read_text())["mergedPools"]
    assert [p["pool"] for p in listed] == [POOL]
    (replica,) = listed[0]["replicas"]

    # traffic stops (2 tokens every 5 s is well under the threshold): drained, deleted
    drained = eventually(
        lambda: (ask(2), (pool_manifest() or {}).get("metadata", {}).get("annotations"))[1],
        within_s=300,
        interval_s=5.0,
        what="the drain annotation",
        abort=up.exited,
    )
    assert ANNOTATION_DRAINING_SINCE in drained
    eventually(
        lambda: (ask(2), pool_manifest() is None)[1],
        within_s=120,
        interval_s=2.0,
        what="the merged pool's deletion",
        abort=up.exited,
    )
    # every request along the way was answered (ask asserts each one); now the shared pool
    assert ask(2) != "merged"
    assert "merged" in tiers
    assert json.loads((up.state / "replicas.json").read_text()).get("mergedPools", {}) == {}
    assert json.loads((up.state / "up.json").read_text())["mergedPools"] == []
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{replica['internalUrl']}/healthz", timeout=2)
    log = up.log_text()
    for reason in ("MergedPoolDraining", "MergedPoolDeleted"):
        assert f"autoMerge: {reason}" in log
