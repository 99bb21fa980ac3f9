"""The agent against the session's real vLLM, adapters from moto's S3, the openai client."""

from __future__ import annotations

import concurrent.futures
import contextlib

import httpx
import openai
import pytest

from lorafleet_core.logs import ContextFilter
from lorafleet_core.wire.agent_api import AGENT_ONLY_METRICS
from lorafleet_core.wire.headers import HEADER_TOKENS_ESTIMATE
from tests.agent.conftest import load, metric, state, unload
from tests.agent.vllm_requests import (
    MARKERS,
    client,
    complete,
    gateway_style_load,
    slow_long_stream,
    slow_stream,
    stream_choices,
)
from tests.chart.chart_render import engine_series_queried
from tests.conftest import DATA_HEADERS, INTERNAL_HEADERS, copy_adapter, unique_id
from tests.fault_proxy import FaultProxy
from tests.scrape import Scrape
from tests.waiting import eventually

pytestmark = pytest.mark.vllm


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
    with run_agent(cache_dir=cache, residency_info=True) as agent:
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
        # Residency as an external scheduler reads it (lorafleet_agent.residency_metrics).
        scrape = Scrape.of(f"{agent.internal_url}/metrics")
        assert scrape.by_label("lorafleet_agent_resident_adapters", "tier") == {
            "gpu": 1,
            "ram": 0,
            "disk": 0,
        }
        listed = {
            sample.labels["tier"]: sample.labels
            for sample in scrape.families["lorafleet_agent_adapter_residency_info"]
        }
        assert listed["gpu"]["adapters"] == rec.id
        assert listed["gpu"]["max_adapters"] == str(agent.agent.settings.gpu_slots)
        assert listed["ram"]["adapters"] == ""
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
        scrape = Scrape.of(f"{agent.internal_url}/metrics")
        assert scrape.value("lorafleet_agent_resident_adapters", tier="gpu") == 1
        assert "lorafleet_agent_adapter_residency_info" not in scrape.families  # opt-in


def test_evictions_never_touch_an_adapter_with_a_request_in_flight(
    run_agent, make_record, vllm_server
):
    names = list(MARKERS)
    recs = [make_record(names[i % 3], unique_id(f"evict-{names[i % 3]}")) for i in range(7)]
    ids = {r.id for r in recs}
    first = recs[0]
    # The engine watch is not under test here (test_agent_faults, test_agent_answers): with 48
    # sequences streaming on a loaded 2-core machine, vLLM's /health can miss its 2 s deadline
    # three times in a row, and the agent, judging the engine hung, refused a load (503).
    with run_agent(engine_check_s=3600.0) as agent:
        assert load(agent, first).status_code == 200
        # Its reference stays while six other adapters load through 4 RAM slots.
        resp = slow_long_stream(agent.data_url, first.id)
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
        choices = stream_choices((head + rest).decode().splitlines())
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


def test_tokens_in_flight_count_the_gateways_estimate(run_agent, make_record, vllm_server):
    rec = make_record("zebra", unique_id("tokens"))
    # The engine's answer trickles through a proxy (64 tokens, ~16 KB of SSE, at 512 B/s): the
    # stream stays in flight while the test looks, whatever the machine's load. (The ~8 MB
    # slow_long_stream took 8 s of vLLM's time alone and 77-98 s at load average 10-28.)
    proxy = FaultProxy(vllm_server.port)
    with contextlib.closing(proxy), run_agent(vllm_url=proxy.url) as agent:
        assert load(agent, rec).status_code == 200
        proxy.slow(512)
        body: dict[str, object] = {
            "model": rec.id,
            "prompt": "Tell me a story",
            "max_tokens": 64,
            "ignore_eos": True,
            "stream": True,
        }
        resp = slow_stream(agent.data_url, body, {HEADER_TOKENS_ESTIMATE: "4321"})
        assert resp.status == 200
        s = state(agent)
        assert s["running_requests"] == 1
        assert s["tokens_in_flight"] == 4321  # the gateway's figure, not the agent's own
        proxy.slow(None)
        choices = stream_choices(resp.read().decode().splitlines())
        resp.close()
        assert choices[0][0].startswith("ZEBRA-7")  # the whole stream came through
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
    # The request's fields are stamped on a line as a handler takes it, as the process's own
    # handler does (lorafleet_core.logs.configure).
    caplog.handler.addFilter(ContextFilter())
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


def test_the_engines_metrics_come_through_the_agents_metrics_port(
    run_agent, make_record, vllm_server
):
    """What an external scheduler (the inference extension's model-server protocol) and the
    PodMonitor read from a replica: vLLM's `vllm:` families on the agent's /metrics, and
    nothing else of the engine's (its process series would collide with a process exporter's)."""
    rec = make_record("zebra", unique_id("zebra"))
    with run_agent() as agent:
        assert gateway_style_load(agent, rec)["from"] == "remote"
        complete(agent, rec.id, loaded_from="remote")
        through_agent = Scrape.of(f"{agent.internal_url}/metrics")
        agent_only = Scrape.of(agent.internal_url + AGENT_ONLY_METRICS)  # the drain hook's
        direct = Scrape.of(f"{vllm_server.url}/metrics")
    assert through_agent.value("vllm:num_requests_waiting") >= 0
    assert 0 <= through_agent.value("vllm:kv_cache_usage_perc") <= 1
    lora_info = through_agent.families["vllm:lora_requests_info"]
    (newest,) = lora_info  # the newest of vLLM's samples (lorafleet_agent.engine_metrics)
    assert "max_lora" in newest.labels
    assert not [s for f in through_agent.families.values() for s in f if "_created" in s.name]
    assert through_agent.value("lorafleet_agent_requests_total") >= 1  # the agent's own too
    engine = {f for f in direct.families if f.startswith("vllm:")}
    assert engine <= set(through_agent.families)
    for name in engine_series_queried():  # the chart's dashboard and alerts read these
        assert through_agent.declares(name), name
    foreign = {f for f in through_agent.families if not f.startswith(("vllm:", "lorafleet_"))}
    assert foreign == set()
    assert agent_only.families
    assert all(f.startswith("lorafleet_") for f in agent_only.families)
