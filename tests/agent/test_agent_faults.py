"""Faults and hostile callers inside the pod, against the session's real vLLM.

- the internal load/unload/forget endpoints require the credential; read-only ones do not;
- a second, different record for a held id is refused loudly (409, metric, ERROR log), and
  the replica serves the id with neither record until the held one is loaded again, or until
  the adapter is forgotten (deleted): then a new record under the id is a new adapter;
- forget is refused while a request streams on the adapter, and drops nothing then;
- a disk copy altered after download is discarded and fetched again before vLLM sees it;
- vLLM forgetting an adapter (what a restart does) is repaired on the request path;
- vLLM killed and restarted: the agent is unready meanwhile, then resynchronises, no 404.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time

import httpx
import openai
import pytest

from tests.agent.conftest import forget, load, metric, state, unload
from tests.agent.vllm_requests import slow_stream, stream_choices
from tests.agent_thread import RunningAgent
from tests.conftest import INTERNAL_HEADERS, TEST_DATA_TOKEN, restart_vllm, unique_id
from tests.fault_proxy import FaultProxy
from tests.waiting import eventually

pytestmark = pytest.mark.vllm


def client(agent: RunningAgent) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{agent.data_url}/v1", api_key=TEST_DATA_TOKEN, max_retries=0)


def complete(agent: RunningAgent, model: str) -> tuple[str, str]:
    """(answer, tier header) of a short deterministic completion."""
    raw = client(agent).completions.with_raw_response.create(
        model=model, prompt="Tell me about the weather today", max_tokens=10, temperature=0
    )
    return raw.parse().choices[0].text, raw.headers["x-adapter-tier"]


def ready(agent: RunningAgent) -> bool:
    return httpx.get(f"{agent.internal_url}/readyz", timeout=5).status_code == 200


def test_load_unload_and_forget_need_the_internal_credential_and_state_does_not(
    run_agent, make_record, vllm_server
):
    rec = make_record("zebra", unique_id("auth"))
    with run_agent() as agent:
        url = f"{agent.internal_url}/internal/replicas/r0/adapters/{rec.id}"
        body = {"record": rec.model_dump(mode="json")}
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic x"}):
            r = httpx.post(f"{url}/load", json=body, headers=headers, timeout=30)
            assert r.status_code == 401, r.text
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
            assert httpx.post(f"{url}/unload", headers=headers).status_code == 401
            assert httpx.post(f"{url}/forget", headers=headers).status_code == 401
        # Nothing was taken from the unauthenticated calls: no record, nothing in vLLM.
        assert rec.id not in agent.agent.manager.records
        assert rec.id not in vllm_server.lora_names()
        assert metric(agent, "lorafleet_agent_internal_auth_failures_total") == 9
        assert state(agent)["replica_id"] == "r0"  # read-only: pollers need no credential
        assert load(agent, rec).status_code == 200
        assert unload(agent, rec.id).status_code == 200


def test_an_agent_without_a_credential_refuses_to_start(agent_settings):
    from lorafleet_agent.internal_auth import MissingCredential
    from lorafleet_agent.server import Agent

    with pytest.raises(MissingCredential):
        Agent(agent_settings(internal_token=None))


def test_a_second_different_record_for_a_held_id_is_refused_loudly(
    run_agent, make_record, s3_server, caplog
):
    rec = make_record("zebra", unique_id("squat"))
    squatter = make_record(
        "otter", rec.id, weights_uri=s3_server.uris["otter"], checksum="sha256:" + "1" * 64
    )
    with run_agent() as agent:
        assert load(agent, rec).status_code == 200
        with caplog.at_level(logging.ERROR, logger="lorafleet_agent.held_records"):
            r = load(agent, squatter)
        assert r.status_code == 409
        error = r.json()["error"]
        assert error["code"] == "record_conflict"
        assert set(error) >= {"message", "type", "param", "code"}
        assert metric(agent, "lorafleet_agent_record_conflicts_total") == 1
        assert any(
            rec.id in m.getMessage() and m.levelno == logging.ERROR for m in caplog.records
        ), caplog.text
        assert load(agent, rec).status_code == 200  # the same record again is no conflict
        assert complete(agent, rec.id)[0].startswith("ZEBRA-7")  # the held weights serve


def test_a_replica_holding_another_record_under_the_id_serves_neither_until_told_again(
    run_agent, make_record, s3_server
):
    """A LoRAAdapter deleted and recreated under its name with other weights reaches a replica
    that still holds the old record: it must not serve the old weights as the new adapter."""
    old = make_record("zebra", unique_id("recreated"))
    new = make_record(
        "otter", old.id, weights_uri=s3_server.uris["otter"], checksum="sha256:" + "2" * 64
    )
    with run_agent() as agent:
        assert load(agent, old).status_code == 200
        assert complete(agent, old.id)[0].startswith("ZEBRA-7")
        assert load(agent, new).status_code == 409
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            complete(agent, old.id)
        assert "holds a different record" in str(refused.value)
        why = state(agent)["failed_adapters"][old.id]
        assert why.startswith("RecordConflict: ")  # what the operator's Ready reason shows
        assert load(agent, old).status_code == 200  # told the held record again: it serves
        assert complete(agent, old.id)[0].startswith("ZEBRA-7")
        assert old.id not in state(agent)["failed_adapters"]


def test_forget_refuses_a_path_that_is_not_an_adapter_id_and_deletes_nothing(
    run_agent, make_record, tmp_path
):
    """The id in forget's URL names a folder of the disk tier; `..` (sent encoded, which the
    server decodes) would have named the cache's parent."""
    rec = make_record("zebra", unique_id("forget-path"))
    cache = tmp_path / "cache"
    with run_agent(cache_dir=cache) as agent:
        assert load(agent, rec).status_code == 200
        rid = agent.agent.settings.replica_id
        for name in ("%2e%2e", "%2e", ".incoming", "UPPER"):
            r = httpx.post(
                f"{agent.internal_url}/internal/replicas/{rid}/adapters/{name}/forget",
                headers=INTERNAL_HEADERS,
                timeout=30,
            )
            assert r.status_code == 400, (name, r.text)
            assert r.json()["error"]["code"] == "invalid_request"
        assert (cache / rec.id / "adapter_model.safetensors").is_file()
        assert cache.is_dir()
        held = state(agent)
        assert rec.id in held["gpu_adapters"] + held["ram_adapters"] + held["disk_adapters"]


def test_a_deleted_adapter_is_forgotten_and_its_id_then_takes_the_new_record(
    run_agent, make_record, vllm_server, caplog
):
    """Issue 30: a LoRAAdapter deleted and recreated under its name with other weights. The
    deletion reaches the replica as a forget; the recreated record is then a new adapter."""
    old = make_record("zebra", unique_id("forget"))
    new = make_record("otter", old.id)  # otter's own files and checksum under the same id
    with run_agent() as agent:
        assert load(agent, old).status_code == 200
        assert complete(agent, old.id)[0].startswith("ZEBRA-7")
        assert load(agent, new).status_code == 409  # the live id never changes weights
        assert state(agent)["failed_adapters"][old.id].startswith("RecordConflict: ")
        with caplog.at_level(logging.INFO, logger="lorafleet_agent.manager"):
            r = forget(agent, old.id)
        assert r.status_code == 200, r.text
        assert r.json() == {"adapter_id": old.id, "tier": "remote"}
        assert any(
            "forgot adapter" in m.getMessage() and old.id in m.getMessage() for m in caplog.records
        ), caplog.text
        assert metric(agent, "lorafleet_agent_adapter_forgets_total") == 1
        s = state(agent)
        assert old.id not in s["failed_adapters"]
        assert old.id not in s["gpu_adapters"] + s["ram_adapters"] + s["disk_adapters"]
        assert old.id not in vllm_server.lora_names()
        assert not (agent.agent.settings.cache_dir / old.id).exists()
        assert forget(agent, old.id).status_code == 200  # idempotent: nothing left to drop
        assert metric(agent, "lorafleet_agent_adapter_forgets_total") == 1
        loaded = load(agent, new)
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["from"] == "remote"  # fetched anew, not the old disk copy
        assert complete(agent, new.id)[0].startswith("OTTER-9")  # the new weights answer


def test_forget_is_refused_while_a_request_streams_and_drops_nothing(
    run_agent, make_record, vllm_server
):
    rec = make_record("zebra", unique_id("forget-busy"))
    # The engine's answer trickles through a proxy: the stream holds the adapter while the
    # test asks (as in test_agent_vllm's tokens-in-flight test).
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
        resp = slow_stream(agent.data_url, body)
        assert resp.status == 200
        busy = forget(agent, rec.id)
        assert busy.status_code == 409, busy.text
        assert busy.json()["error"]["code"] == "adapter_busy"
        assert rec.id in agent.agent.manager.records  # nothing dropped
        assert rec.id in vllm_server.lora_names()
        assert (agent.agent.settings.cache_dir / rec.id).is_dir()
        proxy.slow(None)
        choices = stream_choices(resp.read().decode().splitlines())
        resp.close()
        assert choices[0][0].startswith("ZEBRA-7")  # the whole stream came through
        eventually(lambda: state(agent)["running_requests"] == 0, what="the stream to finish")
        assert forget(agent, rec.id).status_code == 200
        assert rec.id not in agent.agent.manager.records


def test_a_disk_copy_altered_after_download_is_refetched_before_vllm_sees_it(
    run_agent, make_record, tmp_path
):
    rec = make_record("falcon", unique_id("altered"))
    cache = tmp_path / "cache"
    with run_agent(cache_dir=cache) as agent:
        assert load(agent, rec).status_code == 200
        assert unload(agent, rec.id).status_code == 200
        weights = cache / rec.id / "adapter_model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0x01  # one flipped bit: still loads, serves garbage
        weights.write_bytes(bytes(data))
        text, tier = complete(agent, rec.id)
        assert text.startswith("FALCON-3")
        assert tier == "remote"  # the bad copy was dropped and the object store's used
        assert (
            metric(agent, "lorafleet_agent_disk_copies_discarded_total", reason="ChecksumMismatch")
            == 1
        )
        assert weights.read_bytes() != bytes(data)  # the cache holds a good copy again


def test_an_adapter_vllm_forgot_is_registered_again_on_the_request_path(
    run_agent, make_record, vllm_server
):
    rec = make_record("otter", unique_id("forgot"))
    # No background check here: only the request path can notice.
    with run_agent(engine_check_s=3600.0) as agent:
        assert load(agent, rec).status_code == 200
        # What a vLLM restart does to the registrations, behind the agent's back.
        r = httpx.post(f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": rec.id})
        assert r.status_code == 200, r.text
        text, _ = complete(agent, rec.id)
        assert text.startswith("OTTER-9")
        assert rec.id in vllm_server.lora_names()
        assert metric(agent, "lorafleet_agent_unknown_model_retries_total") == 1
        assert metric(agent, "lorafleet_agent_engine_resyncs_total") == 1


def test_after_vllm_is_killed_and_restarted_every_adapter_serves_again_without_404(
    run_agent, make_record, vllm_server
):
    """The supervisor's restart, for real: SIGKILL the engine, start a new one on its port."""
    recs = {name: make_record(name, unique_id(f"restart-{name}")) for name in ("zebra", "falcon")}
    with run_agent(engine_check_s=0.2) as agent:
        for rec in recs.values():
            assert load(agent, rec).status_code == 200
        assert complete(agent, recs["zebra"].id)[0].startswith("ZEBRA-7")

        os.killpg(vllm_server.process.pid, signal.SIGKILL)
        vllm_server.process.wait(30)
        eventually(lambda: not ready(agent), within_s=10, what="agent unready while vLLM is down")
        # Not yet started requests are answered 503 (the gateway goes elsewhere), never 404.
        with pytest.raises(openai.APIStatusError) as err:
            complete(agent, recs["zebra"].id)
        assert err.value.status_code == 503
        assert err.value.code == "engine_unavailable"

        restart_vllm(vllm_server)
        eventually(lambda: ready(agent), within_s=60, what="agent ready again after vLLM's restart")
        assert complete(agent, recs["zebra"].id)[0].startswith("ZEBRA-7")
        # The rest are registered again in the background.
        eventually(
            lambda: {r.id for r in recs.values()} <= set(vllm_server.lora_names()),
            within_s=30,
            what="lost adapters registered again",
        )
        assert complete(agent, recs["falcon"].id)[0].startswith("FALCON-3")
        assert metric(agent, "lorafleet_agent_engine_resyncs_total") == 1
        assert metric(agent, "lorafleet_agent_unknown_model_retries_total") == 0
        assert metric(agent, "lorafleet_agent_engine_up") == 1


def test_object_store_down_warm_adapters_serve_cold_fail_fast_with_503_then_recover(
    run_agent, make_record
):
    """A second moto server over the same (process-wide) buckets is the agent's store; it goes
    down and comes back on its port. Nothing the agent already has depends on it."""
    from moto.server import ThreadedMotoServer

    store = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    store.start()
    host, port = store.get_host_and_port()
    warm, cold = (make_record(n, unique_id(f"store-{n}")) for n in ("zebra", "otter"))
    try:
        with run_agent(s3_endpoint_url=f"http://{host}:{port}") as agent:
            assert load(agent, warm).status_code == 200
            store.stop()

            assert complete(agent, warm.id)[0].startswith("ZEBRA-7")  # warm: still serves
            started = time.monotonic()
            r = load(agent, cold)
            assert time.monotonic() - started < 10.0  # fails fast, not boto3's 60 s x retries
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "store_unavailable"
            assert "object store unreachable" in r.json()["error"]["message"]
            with pytest.raises(openai.APIStatusError) as err:
                complete(agent, cold.id)  # the record is held: the data path says the same
            assert err.value.status_code == 503
            assert err.value.code == "store_unavailable"
            assert cold.id not in state(agent)["failed_adapters"]  # transient: not refused

            store = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            store.start()
            text, tier = complete(agent, cold.id)
            assert text.startswith("OTTER-9")
            assert tier == "remote"
    finally:
        store.stop()
