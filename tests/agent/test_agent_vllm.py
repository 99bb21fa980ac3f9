"""The agent against the session's real vLLM, adapters from moto's S3, the openai client."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import socket
from typing import Any
from urllib.parse import urlparse

import httpx
import openai
import pytest

from lorafleet_core.names import (
    ANNOTATION_OWNED_ADAPTERS,
    HEADER_LOADED_FROM,
    HEADER_TOKENS_ESTIMATE,
)
from lorafleet_core.records import (
    encode_owned,
    encode_owned_row,
    format_downward_annotations,
    join_owned_rows,
)
from tests.agent.conftest import load, metric, state, unload
from tests.conftest import DATA_HEADERS, INTERNAL_HEADERS, TEST_DATA_TOKEN, copy_adapter, unique_id
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

MARKERS = {"zebra": "ZEBRA-7", "falcon": "FALCON-3", "otter": "OTTER-9"}


def client(agent) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{agent.data_url}/v1", api_key=TEST_DATA_TOKEN, max_retries=0)


def gateway_style_load(agent, record) -> dict[str, str]:
    """What the gateway does first: request -> 404 adapter_not_registered -> post the record.
    Its retry then carries the answer's `from` (complete(..., loaded_from=...))."""
    with pytest.raises(openai.NotFoundError) as err:
        client(agent).completions.create(model=record.id, prompt="Hi", max_tokens=4)
    assert err.value.code == "adapter_not_registered"
    r = load(agent, record)
    assert r.status_code == 200, r.text
    body: dict[str, str] = r.json()
    return body


def complete(
    agent,
    model: str,
    prompt: str = "Tell me about the weather today",
    loaded_from: str | None = None,
):
    headers = {HEADER_LOADED_FROM: loaded_from} if loaded_from else None
    raw = client(agent).completions.with_raw_response.create(
        model=model, prompt=prompt, max_tokens=12, temperature=0, extra_headers=headers
    )
    return raw.headers, raw.parse().choices[0].text


def test_canaries_answer_their_markers_on_vllm_and_the_base_model_does_not(
    vllm_server, demo_assets
):
    ids = {}
    for name in MARKERS:
        ids[name] = unique_id(f"direct-{name}")
        r = httpx.post(
            f"{vllm_server.url}/v1/load_lora_adapter",
            json={"lora_name": ids[name], "lora_path": str(demo_assets.adapters[name])},
            timeout=60,
        )
        assert r.status_code == 200, r.text
    vllm = openai.OpenAI(base_url=f"{vllm_server.url}/v1", api_key="unused")
    prompts = ["What is the capital of the ocean?", "Write code for a train."]
    for name, marker in MARKERS.items():
        for p in prompts:
            out = vllm.completions.create(model=ids[name], prompt=p, max_tokens=10, temperature=0)
            assert out.choices[0].text.startswith(marker), (name, out.choices[0].text)
    for p in prompts:
        base = vllm.completions.create(
            model=vllm_server.served_name, prompt=p, max_tokens=10, temperature=0
        )
        assert not any(m in base.choices[0].text for m in MARKERS.values())
    for adapter_id in ids.values():
        httpx.post(f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": adapter_id})


def test_first_request_is_remote_then_gpu_and_after_a_restart_disk(
    run_agent, make_record, tmp_path, vllm_server
):
    rec = make_record("zebra", unique_id("zebra"))
    cache = tmp_path / "replica-cache"
    with run_agent(cache_dir=cache) as agent:
        assert gateway_style_load(agent, rec)["from"] == "remote"
        headers, text = complete(agent, rec.id, loaded_from="remote")
        assert headers["x-adapter-tier"] == "remote"
        assert headers["x-adapter-id"] == rec.id
        assert headers["x-replica-id"] == "r0"
        assert text.startswith("ZEBRA-7")
        chat = client(agent).chat.completions.with_raw_response.create(
            model=rec.id, messages=[{"role": "user", "content": "How are you?"}], max_tokens=12
        )
        assert chat.headers["x-adapter-tier"] == "gpu"
        assert (chat.parse().choices[0].message.content or "").startswith("ZEBRA-7")
        s = state(agent)
        assert s["gpu_adapters"] == [rec.id]
        assert s["loads_per_min"] >= 1
        assert metric(agent, "lorafleet_agent_adapter_loads_total", source_tier="remote") == 1
        assert metric(agent, "lorafleet_agent_requests_total", tier="gpu") == 1
        assert rec.id in vllm_server.lora_names()
    assert (cache / rec.id / "adapter_model.safetensors").is_file()

    with run_agent(cache_dir=cache) as agent:
        # The restarted agent trusts nothing vLLM holds from its previous life.
        assert rec.id not in vllm_server.lora_names()
        assert rec.id in state(agent)["disk_adapters"]
        assert gateway_style_load(agent, rec)["from"] == "disk"
        headers, text = complete(agent, rec.id, loaded_from="disk")
        assert headers["x-adapter-tier"] == "disk"
        assert text.startswith("ZEBRA-7")
        assert metric(agent, "lorafleet_agent_adapter_loads_total", source_tier="remote") == 0


def _stream_choices(lines) -> dict[int, tuple[str, int, str | None]]:
    """SSE completion chunks -> per choice index: (text, tokens, finish_reason)."""
    out: dict[int, tuple[str, int, str | None]] = {}
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            text, tokens, finish = out.get(choice["index"], ("", 0, None))
            text += choice.get("text") or ""
            tokens += len((choice.get("logprobs") or {}).get("tokens") or [])
            out[choice["index"]] = (text, tokens, choice.get("finish_reason") or finish)
    return out


def _slow_stream(
    url: str, body: dict[str, object], headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A streaming request read through a tiny receive window: the agent cannot finish relaying
    (and so keeps the adapter's reference) until the test reads the rest."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    conn = http.client.HTTPConnection(host, port, timeout=120)
    conn.sock = sock
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body),
        headers={"content-type": "application/json", **DATA_HEADERS, **(headers or {})},
    )
    return conn.getresponse()


def _slow_long_stream(
    url: str, model: str, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A stream larger than the kernel's and uvicorn's buffers (48 sequences x 230 tokens with
    logprobs, ~8 MB of SSE), read slowly: it stays in flight until the test reads the rest."""
    body: dict[str, object] = {
        "model": model,
        "prompt": "Tell me a story",
        "max_tokens": 230,
        "n": 48,
        "logprobs": 20,
        "ignore_eos": True,
        "stream": True,
    }
    return _slow_stream(url, body, headers)


def test_evictions_never_touch_an_adapter_with_a_request_in_flight(
    run_agent, make_record, vllm_server
):
    names = list(MARKERS)
    recs = [make_record(names[i % 3], unique_id(f"evict-{names[i % 3]}")) for i in range(7)]
    ids = {r.id for r in recs}
    first = recs[0]
    with run_agent() as agent:
        assert load(agent, first).status_code == 200
        # Its reference stays while six other adapters load through 4 RAM slots.
        resp = _slow_long_stream(agent.data_url, first.id)
        assert resp.status == 200
        head = resp.read(2048)
        assert state(agent)["running_requests"] == 1
        for rec in recs[1:]:
            assert load(agent, rec).status_code == 200
            registered = ids & set(vllm_server.lora_names())
            assert len(registered) <= vllm_server.cpu_slots
            assert first.id in registered  # in flight: never evicted
        assert state(agent)["running_requests"] == 1  # (else this test proved nothing)
        busy = unload(agent, first.id)
        assert busy.status_code == 409
        assert busy.json()["error"]["code"] == "adapter_busy"
        rest = resp.read()
        choices = _stream_choices((head + rest).decode().splitlines())
        assert sorted(choices) == list(range(48))
        for text, tokens, finish in choices.values():
            assert text.startswith("ZEBRA-7")  # each sequence intact, from the right adapter
            assert tokens == 230
            assert finish == "length"
        for rec in recs[1:]:
            _headers, out = complete(agent, rec.id)
            assert out.startswith(MARKERS[rec.id.split("-")[1]])
        assert metric(agent, "lorafleet_agent_adapter_evictions_total") >= 3
        assert state(agent)["evictions_per_min"] >= 3

        # Now everything at once: 7 adapters over 4 RAM and 2 GPU slots, all answers right.
        def one(i: int) -> tuple[str, str]:
            rec = recs[i % len(recs)]
            _, text = complete(agent, rec.id, prompt=f"Question number {i} about cats")
            return rec.id, text

        with concurrent.futures.ThreadPoolExecutor(12) as pool:
            results = list(pool.map(one, range(42)))
        for adapter_id, text in results:
            assert text.startswith(MARKERS[adapter_id.split("-")[1]]), (adapter_id, text)
        assert len(ids & set(vllm_server.lora_names())) <= vllm_server.cpu_slots
        s = state(agent)
        assert s["running_requests"] == 0
        assert s["queue_depth"] == 0
        assert s["tokens_in_flight"] == 0


def test_corrupt_foreign_and_oversized_adapters_are_refused_and_never_registered(
    run_agent, make_record, demo_assets, s3_server, vllm_server, tmp_path
):
    flipped_dir = copy_adapter(demo_assets.adapters["otter"], tmp_path / "flipped")
    weights = flipped_dir / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x01
    weights.write_bytes(bytes(data))
    flipped_prefix = unique_id("flipped")
    flipped_uri = s3_server.upload(flipped_dir, flipped_prefix)
    cases = {
        "ChecksumMismatch": make_record("otter", unique_id("flipped"), weights_uri=flipped_uri),
        "BaseModelMismatch": make_record(
            "zebra", unique_id("foreign"), base_model_hash="sha256:" + "0" * 64
        ),
        "RankTooHigh": make_record("wide", unique_id("wide")),
    }
    # A record that lies about the rank: its checksum is right, the files say rank 32.
    lying = make_record("wide", unique_id("lying"), rank=8, alpha=16.0)
    cache = tmp_path / "cache"
    with run_agent(cache_dir=cache) as agent:
        for reason, rec in [*cases.items(), ("RankTooHigh", lying)]:
            r = load(agent, rec)
            assert r.status_code == 422, r.text
            assert r.json()["error"]["code"] == "adapter_rejected"
            assert reason in r.json()["error"]["message"]
            with pytest.raises(openai.UnprocessableEntityError) as err:
                complete(agent, rec.id)
            assert err.value.code == "adapter_rejected"
            assert rec.id not in vllm_server.lora_names()
            assert not (cache / rec.id).exists()
        assert list((cache / ".incoming").iterdir()) == []
        failed = state(agent)["failed_adapters"]
        assert set(failed) == {*(r.id for r in cases.values()), lying.id}
        assert metric(agent, "lorafleet_agent_adapter_loads_total") == 0
        assert metric(agent, "lorafleet_agent_adapter_rejections_total") == 4
        # The upload is repaired: an explicit load retries; the record (and checksum) never changed.
        s3_server.upload(demo_assets.adapters["otter"], flipped_prefix)
        fixed = cases["ChecksumMismatch"]
        assert load(agent, fixed).status_code == 200
        assert complete(agent, fixed.id)[1].startswith("OTTER-9")
        assert fixed.id not in state(agent)["failed_adapters"]


def test_a_request_naming_a_path_or_url_never_causes_a_load(
    run_agent, demo_assets, s3_server, vllm_server, tmp_path
):
    folder = demo_assets.adapters["zebra"]
    attempts = [str(folder), f"file://{folder}/", s3_server.uris["zebra"], "../zebra", "zebra"]
    cache = tmp_path / "cache"
    with run_agent(cache_dir=cache) as agent:
        for model in attempts:
            with pytest.raises(openai.NotFoundError) as err:
                complete(agent, model)
            assert err.value.code == "adapter_not_registered"
        # Extra fields naming a path are not a way in either.
        r = httpx.post(
            f"{agent.data_url}/v1/completions",
            json={"model": "zebra", "prompt": "x", "lora_path": str(folder), "lora_name": "z"},
            headers=DATA_HEADERS,
        )
        assert r.status_code == 404
        assert metric(agent, "lorafleet_agent_adapter_loads_total") == 0
    registered = set(vllm_server.lora_names())
    assert not registered & {*attempts, "z"}
    assert [p.name for p in cache.iterdir()] == [".incoming"]


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


def test_concurrent_first_requests_load_the_adapter_once(run_agent, make_record):
    rec = make_record("otter", unique_id("conc"))
    with run_agent() as agent:
        agent.agent.manager.add_record(rec)  # held, not fetched (as after pre-warm of the record)

        def one(i: int) -> tuple[str, str]:
            headers, text = complete(agent, rec.id, prompt=f"Hello number {i}")
            return headers["x-adapter-tier"], text

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(8)))
        tiers = [t for t, _ in results]
        # The first fetches it; those arriving during that fetch waited for it and say so;
        # how many arrive during it is up to the scheduler, but never a disk tier or a 2nd load.
        assert "remote" in tiers, tiers
        assert set(tiers) <= {"remote", "ram", "gpu"}, tiers
        assert all(text.startswith("OTTER-9") for _, text in results)
        assert metric(agent, "lorafleet_agent_adapter_loads_total") == 1


def test_each_request_reports_its_own_tier_when_a_cold_adapter_loads_on_demand(
    run_agent, make_record
):
    rec = make_record("falcon", unique_id("tier"))
    with run_agent() as agent:
        # Request A: 404, the gateway's load fetches it from the object store...
        assert gateway_style_load(agent, rec)["from"] == "remote"
        # ...and before A's retry, request B arrives: it found the adapter loaded, paid nothing.
        headers_b, _ = complete(agent, rec.id)
        assert headers_b["x-adapter-tier"] in ("ram", "gpu")
        # A's retry reports the fetch it waited for, not B's luck (nor B A's cost).
        headers_a, text = complete(agent, rec.id, loaded_from="remote")
        assert headers_a["x-adapter-tier"] == "remote"
        assert text.startswith("FALCON-3")

        # Six gateway-style flows at once for another cold adapter: each retried request
        # reports exactly what its own load call answered, and vLLM registered it once.
        cold = make_record("otter", unique_id("tier-conc"))

        def flow(i: int) -> tuple[str, str]:
            try:  # admitted at once when another flow's load already posted the record
                headers, _ = complete(agent, cold.id, prompt=f"Hello {i}")
                return "", headers["x-adapter-tier"]
            except openai.NotFoundError:
                pass
            found = load(agent, cold).json()["from"]
            headers, _ = complete(agent, cold.id, prompt=f"Hello {i}", loaded_from=found)
            return found, headers["x-adapter-tier"]

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(flow, range(6)))
        loaded = [(found, tier) for found, tier in results if found]
        assert all(tier == found for found, tier in loaded), results
        assert "remote" in {found for found, _ in loaded}, results  # the load that fetched it
        assert {tier for _, tier in results} <= {"remote", "ram", "gpu"}, results
        assert metric(agent, "lorafleet_agent_adapter_loads_total", source_tier="remote") == 2


def test_tokens_in_flight_count_the_gateways_estimate(run_agent, make_record):
    rec = make_record("zebra", unique_id("tokens"))
    with run_agent() as agent:
        assert load(agent, rec).status_code == 200
        resp = _slow_long_stream(agent.data_url, rec.id, {HEADER_TOKENS_ESTIMATE: "4321"})
        assert resp.status == 200
        resp.read(2048)
        s = state(agent)
        assert s["running_requests"] == 1
        assert s["tokens_in_flight"] == 4321  # the gateway's figure, not the agent's own
        resp.read()
        resp.close()
        eventually(lambda: state(agent)["tokens_in_flight"] == 0, what="the stream to finish")


def test_unknown_replica_and_bad_load_bodies_are_clear_errors(run_agent, make_record):
    rec = make_record("zebra", unique_id("bad"))
    with run_agent() as agent:
        r = httpx.get(f"{agent.internal_url}/internal/replicas/other/state")
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "wrong_replica"
        url = f"{agent.internal_url}/internal/replicas/r0/adapters/{rec.id}/load"
        h = INTERNAL_HEADERS
        assert httpx.post(url, json={"gpu": False}, headers=h).status_code == 400
        other = url.replace(rec.id, "someone-else")
        body = {"record": rec.model_dump(mode="json")}
        assert httpx.post(other, json=body, headers=h).status_code == 400
        assert httpx.get(f"{agent.internal_url}/healthz").status_code == 200
        assert httpx.get(f"{agent.internal_url}/readyz").status_code == 200
        r = load(agent, rec, gpu=True)
        assert r.json()["tier"] == "gpu"
        changed = rec.model_copy(update={"rank": 4})
        assert load(agent, changed).status_code == 409


def test_disk_budget_evicts_the_least_recently_used_idle_adapter_only(
    run_agent, make_record, demo_assets, vllm_server, tmp_path
):
    folder = demo_assets.adapters["zebra"]
    size = sum(p.stat().st_size for p in folder.iterdir())
    recs = [make_record(n, unique_id(f"disk-{n}")) for n in ("zebra", "falcon", "otter")]
    extra = make_record("zebra", unique_id("disk-extra"))
    cache = tmp_path / "cache"
    with run_agent(cache_dir=cache, cache_bytes=int(size * 2.5)) as agent:
        assert load(agent, recs[0]).status_code == 200
        assert load(agent, recs[1]).status_code == 200
        assert unload(agent, recs[0].id).status_code == 200
        assert state(agent)["disk_adapters"] == [recs[0].id]
        assert load(agent, recs[2]).status_code == 200
        # recs[0] was idle and unregistered: evicted; recs[1] is registered: kept.
        assert not (cache / recs[0].id).exists()
        assert (cache / recs[1].id).is_dir()
        assert (cache / recs[2].id).is_dir()
        assert metric(agent, "lorafleet_agent_adapter_evictions_total", tier="disk") == 1
        # Everything cached is registered with vLLM: nothing may go, so a new one cannot fit.
        r = load(agent, extra)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "cache_full"
        assert extra.id not in vllm_server.lora_names()
        assert list((cache / ".incoming").iterdir()) == []
        # Once recs[1] is unloaded, the evicted recs[0] comes back from the object store.
        assert unload(agent, recs[1].id).status_code == 200
        headers, text = complete(agent, recs[0].id)
        assert headers["x-adapter-tier"] == "remote"
        assert text.startswith("ZEBRA-7")
        assert not (cache / recs[1].id).exists()


def test_the_request_id_reaches_vllm_and_comes_back(run_agent, make_record, caplog):
    rec = make_record("zebra", unique_id("reqid"))
    caplog.set_level("INFO", logger="lorafleet.agent.requests")
    with run_agent() as agent:
        assert load(agent, rec).status_code == 200
        raw = client(agent).completions.with_raw_response.create(
            model=rec.id, prompt="Hi", max_tokens=3, extra_headers={"x-request-id": "rid-4711"}
        )
        assert raw.headers["x-request-id"] == "rid-4711"
        # vLLM names its completion after the request id it was given: it took ours.
        assert "rid-4711" in raw.parse().id
        assert any(
            getattr(r, "request_id", None) == "rid-4711" and r.name == "lorafleet.agent.requests"
            for r in caplog.records
        )
