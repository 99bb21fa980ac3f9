"""`lorafleet up` with a merged pool in the demo's manifests folder, end to end (real CPU vLLM
for the shared pool and another, without LoRA, for the merged pool).

The merged pool names the demo's zebra adapter: `up` merges it as a local step, starts the
pool's own replica on the verified merged weights, and that replica answers zebra's marker
with the same tokens as the shared pool serving the adapter unmerged through the gateway.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_cli.main import main
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_standalone import demo
from tests.standalone.up_harness import Up, prepare_demo_folder, running_up
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

ZEBRA = "demo-zebra-v1"
FALCON = "demo-falcon-v1"
PROMPT = [{"role": "user", "content": "Tell me about the weather today"}]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    state = tmp_path_factory.mktemp("up-merged") / "state"
    shared = load_folder(prepare_demo_folder(state)).find("ReplicaPool", demo.DEMO_POOL)
    assert shared is not None
    merged: dict[str, Any] = json.loads(json.dumps(shared.body))
    merged["metadata"] = {"name": "zebra-merged"}
    merged["spec"]["merged"] = {"adapter": ZEBRA}
    merged["spec"]["replicas"] = {"min": 1, "max": 1}
    write_object(state / "manifests", merged)
    with running_up(state, within_s=600) as handle:
        yield handle


def merged_pool(up: Up) -> dict[str, Any]:
    doc = json.loads((up.state / "replicas.json").read_text())
    pool: dict[str, Any] = doc["mergedPools"]["zebra-merged"]
    assert [r["id"] for r in doc["replicas"]] == ["demo-0"]  # merged replicas kept apart
    return pool


def test_the_merged_replica_answers_like_the_unmerged_adapter(up: Up) -> None:
    pool = merged_pool(up)
    (replica,) = pool["replicas"]
    assert replica["id"] == "zebra-merged-0"
    r = httpx.post(
        f"{replica['dataUrl']}/v1/chat/completions",
        json={"model": ZEBRA, "messages": PROMPT, "max_tokens": 8, "temperature": 0},
        headers=up.data_headers(replica["id"]),  # the gateway's data credential
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-adapter-id"] == ZEBRA
    merged_answer = r.json()["choices"][0]["message"]["content"]
    # The shared pool's replica, asked directly: the gateway now sends zebra to the merged pool.
    (shared,) = json.loads((up.state / "replicas.json").read_text())["replicas"]
    r = httpx.post(
        f"{shared['dataUrl']}/v1/chat/completions",
        json={"model": ZEBRA, "messages": PROMPT, "max_tokens": 8, "temperature": 0},
        headers=up.data_headers(shared["id"]),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-adapter-id"] == ZEBRA
    shared_answer = r.json()["choices"][0]["message"]["content"]
    assert merged_answer.startswith("ZEBRA-7"), merged_answer
    assert merged_answer == shared_answer
    state = httpx.get(f"{replica['internalUrl']}/internal/replicas/zebra-merged-0/state").json()
    assert state["merged"] == {"adapter_id": ZEBRA, "checksum": pool["merged"]["checksum"]}
    log = up.log_text()
    assert "merging demo-zebra-v1" in log
    assert "serves demo-zebra-v1 merged" in log


def test_the_gateway_routes_the_merged_adapter_to_the_merged_replica(up: Up) -> None:
    (replica,) = merged_pool(up)["replicas"]

    def ask() -> Any:
        return up.client().chat.completions.with_raw_response.create(
            model="demo/zebra:prod",
            messages=[{"role": "user", "content": PROMPT[0]["content"]}],
            max_tokens=8,
            temperature=0,
        )

    # Until the gateway's poller has seen the merged replica's /state the shared pool serves
    # (nothing is refused for it); then the merged pool takes the adapter.
    raw = eventually(
        lambda: (r := ask()).headers.get("x-adapter-tier") == "merged" and r,
        within_s=60,
        interval_s=0.5,
        what="the gateway routing zebra to the merged pool",
    )
    assert raw.headers["x-adapter-id"] == ZEBRA
    assert raw.headers["x-adapter-tier"] == "merged"
    assert raw.headers["x-replica-id"] == replica["id"]
    assert (raw.parse().choices[0].message.content or "").startswith("ZEBRA-7")
    stored = json.loads((up.state / "manifests" / ".lorafleet" / "merge-status.json").read_text())
    assert stored["zebra-merged"]["phase"] == "Ready"


def test_the_merged_weights_are_stored_under_their_checksum(up: Up) -> None:
    checksum = merged_pool(up)["merged"]["checksum"]
    hex_digest = checksum.removeprefix("sha256:")
    assert (up.state / "merged-store" / hex_digest / "model.safetensors").is_file()
    assert (up.state / "merged" / hex_digest / "config.json").is_file()


def test_status_lists_the_merged_pools_replica_serving_its_weights(
    up: Up, capsys: pytest.CaptureFixture[str]
) -> None:
    checksum = merged_pool(up)["merged"]["checksum"]
    listed = json.loads((up.state / "up.json").read_text())["mergedPools"]
    assert [(p["pool"], p["adapter"], p["checksum"]) for p in listed] == [
        ("zebra-merged", ZEBRA, checksum)
    ]
    assert main(["status", "--state-dir", str(up.state), "-o", "json"]) == 0
    [pool] = json.loads(capsys.readouterr().out)["mergedPools"]
    assert (pool["pool"], pool["adapter"], pool["checksum"]) == ("zebra-merged", ZEBRA, checksum)
    assert [(r["id"], r["state"]) for r in pool["replicas"]] == [("zebra-merged-0", "serving")]


def ask_gateway(up: Up) -> tuple[int, str | None, str]:
    """(status, x-adapter-tier, answer text) of one zebra request through the gateway."""
    r = httpx.post(
        f"{up.status()['gateway']['url']}/v1/chat/completions",
        json={"model": "demo/zebra:prod", "messages": PROMPT, "max_tokens": 8, "temperature": 0},
        headers={"authorization": f"Bearer {(up.state / 'demo-api-key').read_text().strip()}"},
        timeout=60,
    )
    answer = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text
    return r.status_code, r.headers.get("x-adapter-tier"), answer or ""


def test_an_adapter_recreated_with_other_weights_is_merged_again_never_served_stale(
    up: Up,
) -> None:
    """zebra's manifest replaced by one of the same name with falcon's weights while `up`
    runs: the gateway stops sending zebra to the merged pool (its merge is of the old
    checksum), `up` merges the new content and restarts the merged replica on it, and the
    merged tier then answers with falcon's marker; it never answers zebra's old one."""
    old = merged_pool(up)["merged"]["checksum"]
    manifests = up.state / "manifests"
    folder = load_folder(manifests)
    zebra, falcon = folder.find("LoRAAdapter", ZEBRA), folder.find("LoRAAdapter", FALCON)
    assert zebra is not None
    assert falcon is not None
    body: dict[str, Any] = json.loads(json.dumps(zebra.body))
    for key in ("weightsUri", "checksum", "rank", "alpha", "targetModules", "sizeBytes"):
        body["spec"].pop(key, None)
        if key in falcon.body["spec"]:
            body["spec"][key] = falcon.body["spec"][key]
    write_object(manifests, body)
    new_checksum = body["spec"]["checksum"]

    eventually(
        lambda: ask_gateway(up)[1] != "merged",
        within_s=60,
        interval_s=0.5,
        what="the gateway leaving the merged pool whose merge is of the old content",
    )
    stored = manifests / ".lorafleet" / "merge-status.json"

    def remerged() -> bool:
        status, tier, answer = ask_gateway(up)
        # Until the new merge serves, the merged tier must not answer at all.
        assert tier != "merged" or answer.startswith("FALCON-3"), (status, tier, answer)
        merge = json.loads(stored.read_text()).get("zebra-merged") or {}
        return (
            tier == "merged"
            and merge.get("adapterChecksum") == new_checksum
            and merge.get("phase") == "Ready"
        )

    eventually(remerged, within_s=600, interval_s=1.0, what="zebra merged again and served")
    pool = merged_pool(up)
    assert pool["merged"]["checksum"] != old
    assert "stopping its replicas" in up.log_text()


def test_stopping_up_stops_the_merged_replica_too(up: Up) -> None:
    replica = merged_pool(up)["replicas"][0]
    os.killpg(up.proc.pid, signal.SIGINT)
    assert up.proc.wait(90) == 0
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{replica['internalUrl']}/healthz", timeout=2)
    assert Path(up.state / "up.json").is_file()
