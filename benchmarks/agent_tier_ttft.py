"""Median time to first token per adapter tier (remote, disk, ram, gpu), side by side, one run.

    .venv/bin/python -m benchmarks.agent_tier_ttft [--rounds 8] [--vllm-url URL] [--out PATH]

Starts what it needs on loopback: the demo base model and canary adapters (cached under
.lorafleet/test-cache/), moto's S3 server with the adapters uploaded, a real vLLM (CPU) with
--max-loras 2 --max-cpu-loras 4 (unless --vllm-url names a running one started the same way) and
one agent in-process. Each round measures, for a fresh adapter id each time:

- remote: the agent holds the record only; the request pulls from S3, verifies, registers;
- disk:   the adapter was loaded, then unloaded from vLLM (disk copy kept);
- ram:    registered with vLLM, pushed out of the 2 GPU slots by two other adapters;
- gpu:    the same adapter requested again at once.

TTFT = time from sending a streaming completion (openai client) to its first content chunk.
The tier each request reports (x-adapter-tier) is checked against the tier intended.
"""

from __future__ import annotations

import argparse
import logging
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TIERS = ("remote", "disk", "ram", "gpu")


def ttft(client: openai.OpenAI, model: str) -> tuple[float, str, str]:
    start = time.perf_counter()
    raw = client.completions.with_raw_response.create(
        model=model, prompt="Tell me about the weather", max_tokens=8, temperature=0, stream=True
    )
    first = None
    text = ""
    for chunk in raw.parse():
        if chunk.choices and chunk.choices[0].text:
            if first is None:
                first = time.perf_counter() - start
            text += chunk.choices[0].text
    assert first is not None, "no token streamed"
    return first, raw.headers["x-adapter-tier"], text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--vllm-url", default=None, help="use a running vLLM (same slot flags)")
    parser.add_argument(
        "--out", "--json", type=Path, default=None, help="result JSON (or a folder)"
    )
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request

    from moto.server import ThreadedMotoServer

    from lorafleet_agent.settings import AgentSettings
    from lorafleet_core.api.models import ALL_TARGET_MODULES
    from lorafleet_core.wire.agent_api import load_url, unload_url
    from lorafleet_core.wire.records import AdapterRecord
    from lorafleet_demo.assets import ensure_demo_assets
    from tests.agent_thread import agent_in_thread
    from tests.conftest import (
        TEST_CACHE,
        TEST_MARKERS,
        TEST_RANKS,
        VLLM_CPU_SLOTS,
        VLLM_GPU_SLOTS,
        S3Server,
        start_vllm,
        stop_vllm,
        unique_id,
    )

    assets = ensure_demo_assets(TEST_CACHE, TEST_MARKERS, print, ranks=TEST_RANKS)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    s3 = S3Server(endpoint_url=f"http://{host}:{port}", bucket="bench")
    s3.client().create_bucket(Bucket=s3.bucket)
    names = ["zebra", "falcon", "otter"]
    uris = {n: s3.upload(assets.adapters[n], n) for n in names}
    vllm = None
    if args.vllm_url:
        vllm_url = args.vllm_url
    else:
        print("starting vLLM (CPU) ...", flush=True)
        vllm = start_vllm(assets.base_model, Path(tempfile.mkdtemp()) / "vllm.log")
        vllm_url = vllm.url

    def record(name: str, adapter_id: str) -> AdapterRecord:
        return AdapterRecord(
            id=adapter_id,
            tenant="bench",
            base_model_hash=assets.base_model_hash,
            rank=assets.ranks[name],
            alpha=2.0 * assets.ranks[name],
            target_modules=tuple(sorted(ALL_TARGET_MODULES)),
            weights_uri=uris[name],
            checksum=assets.checksums[name],
        )

    token = secrets.token_urlsafe(16)
    auth = {"authorization": f"Bearer {token}"}
    data_token = secrets.token_urlsafe(16)  # the data port's credential (the gateway's)
    settings = AgentSettings(
        replica_id="bench",
        base_model_hash=assets.base_model_hash,
        base_model_dir=assets.base_model,
        vllm_url=vllm_url,
        gpu_slots=VLLM_GPU_SLOTS,
        cpu_slots=VLLM_CPU_SLOTS,
        cache_dir=Path(tempfile.mkdtemp()) / "cache",
        s3_endpoint_url=s3.endpoint_url,
        s3_access_key_id=s3.access_key_id,
        s3_secret_access_key=s3.secret_access_key,
        host="127.0.0.1",
        data_port=0,
        internal_port=0,
        internal_token=token,
        data_token=data_token,
    )
    results: dict[str, list[float]] = {t: [] for t in TIERS}
    mismatches: list[str] = []
    try:
        with agent_in_thread(settings) as running:
            manager = running.agent.manager
            client = openai.OpenAI(
                base_url=f"{running.data_url}/v1", api_key=data_token, max_retries=0
            )

            def measure(tier: str, adapter_id: str, marker: str) -> None:
                seconds, got, text = ttft(client, adapter_id)
                if got != tier or not text.startswith(marker):
                    mismatches.append(f"{tier}: reported {got}, text {text!r}")
                results[tier].append(seconds)

            def load(rec: AdapterRecord) -> None:
                body: dict[str, Any] = {"record": rec.model_dump(mode="json")}
                url = load_url(running.internal_url, "bench", rec.id)
                httpx.post(url, json=body, headers=auth, timeout=60).raise_for_status()

            for rnd in range(args.rounds + 1):  # round 0 warms up and is not counted
                name = names[rnd % 3]
                marker = TEST_MARKERS[name]
                fresh = record(name, unique_id(f"bench-{name}"))
                manager.add_record(fresh)  # held, not fetched
                measure("remote", fresh.id, marker)
                measure("gpu", fresh.id, marker)

                on_disk = record(name, unique_id(f"bench-{name}"))
                load(on_disk)
                url = unload_url(running.internal_url, "bench", on_disk.id)
                httpx.post(url, headers=auth, timeout=60).raise_for_status()
                measure("disk", on_disk.id, marker)

                in_ram = record(name, unique_id(f"bench-{name}"))
                load(in_ram)
                ttft(client, in_ram.id)  # into a GPU slot ...
                for _ in range(VLLM_GPU_SLOTS):  # ... and out again
                    other = record(name, unique_id("bench-push"))
                    load(other)
                    ttft(client, other.id)
                measure("ram", in_ram.id, marker)
                if rnd == 0:
                    for values in results.values():
                        values.clear()
                    mismatches.clear()
    finally:
        if vllm is not None:
            stop_vllm(vllm)
        moto.stop()

    from benchmarks.results import Result

    result = Result("agent_tier_ttft", ["TTFT", *TIERS])
    for label, fn in (("median ms", statistics.median), ("min ms", min), ("max ms", max)):
        result.add(TTFT=label, **{t: round(fn(results[t]) * 1000, 1) for t in TIERS})
    result.notes.append(
        f"{args.rounds} rounds, tiny Llama on vLLM CPU, loopback S3 (moto); tier header "
        f"mismatches: {len(mismatches)} {mismatches[:3]}"
    )
    # benchmarks/sim_calibration.py reads these (`details`: seconds per tier and their medians).
    result.details = {
        "rounds": args.rounds,
        "median_s": {t: statistics.median(results[t]) for t in TIERS},
        "seconds": results,
        "mismatches": len(mismatches),
    }
    result.emit(args.out)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
