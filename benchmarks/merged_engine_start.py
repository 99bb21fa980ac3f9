"""Start time and decode speed of a merged pool's CPU vLLM: torch.compile (vLLM's default) vs eager.

    /work/wt/with-vllm-slot --bench .venv/bin/python benchmarks/merged_engine_start.py \
        [--runs compiled-cold,compiled-warm,eager] [--tokens 128] [--json PATH]

vLLM's CPU platform compiles the model with torch.compile (Inductor) at start unless LoRA is
enabled (`platforms/cpu.py`: a LoRA config sets the compilation mode to NONE), so a merged
pool's engine, which has no LoRA, compiles and a shared pool's does not. This measures what
`lorafleet up` would start for a merged pool of the demo (the demo base model with the zebra
canary merged, by the standalone merge step; the argv from `standalone.processes.vllm_process`):

- compiled-cold: the default flags, with a fresh compile cache (VLLM_CACHE_ROOT in a new
  folder): a first `lorafleet up`, or one after the cache was cleared or vLLM upgraded;
- compiled-warm: the same flags and the cache the cold run filled (a restart);
- eager: `--enforce-eager` added (what standalone mode now adds for merged pools on CPU).

Per run: seconds from spawning vLLM to `/health` answering 200 (`start_s`), then to the first
completion (`first_answer_s`), then decode speed: one stream alone (`tok_s_1`, 3 requests of
`--tokens` generated tokens each, `ignore_eos`) and 16 concurrent streams (`tok_s_16`:
generated tokens / wall time). Prints a markdown table and the command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.vllm_server import stop, wait_healthy  # noqa: E402  (after the path)

RUNS = ("compiled-cold", "compiled-warm", "eager")
PROMPT = "Tell me about the weather today"


def _merged_model(state: Path) -> tuple[Path, Any]:
    """The demo base with zebra merged (the standalone merge step) and the merged pool."""
    from lorafleet_core.api.models import ALL_TARGET_MODULES
    from lorafleet_core.storage.manifests import load_folder, write_object
    from lorafleet_demo.assets import DEFAULT_MARKERS, ensure_demo_assets
    from lorafleet_standalone.merged import merge_locally, merged_folder, plan_merged_pools

    assets = ensure_demo_assets(
        ROOT / ".lorafleet" / "test-cache", {"zebra": DEFAULT_MARKERS["zebra"]}, print
    )
    folder = state / "manifests"
    folder.mkdir(parents=True, exist_ok=True)
    base = {"name": "demo", "hash": assets.base_model_hash, "uri": f"file://{assets.base_model}"}
    write_object(
        folder,
        {
            "apiVersion": "lorafleet.dev/v1alpha1",
            "kind": "ReplicaPool",
            "metadata": {"name": "zebra-merged"},
            "spec": {
                "baseModel": base,
                "engine": {"maxModelLen": 256},
                "merged": {"adapter": "zebra-v1"},
            },
        },
    )
    write_object(
        folder,
        {
            "apiVersion": "lorafleet.dev/v1alpha1",
            "kind": "LoRAAdapter",
            "metadata": {"name": "zebra-v1"},
            "spec": {
                "tenant": "demo",
                "version": "v1",
                "baseModelHash": assets.base_model_hash,
                "rank": assets.ranks["zebra"],
                "alpha": float(2 * assets.ranks["zebra"]),
                "targetModules": sorted(ALL_TARGET_MODULES),
                "weightsUri": f"file://{assets.adapters['zebra']}/",
                "checksum": assets.checksums["zebra"],
            },
        },
    )
    (plan,) = plan_merged_pools(load_folder(folder))
    status = merge_locally(plan, assets.base_model, state)
    assert status.checksum is not None
    return merged_folder(state, status.checksum), plan.pool


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _complete(url: str, tokens: int) -> int:
    r = httpx.post(
        f"{url}/v1/completions",
        json={
            "model": "zebra-v1",
            "prompt": PROMPT,
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
        },
        timeout=600,
    )
    r.raise_for_status()
    return int(r.json()["usage"]["completion_tokens"])


def measure(run: str, model_dir: Path, pool: Any, cache: Path, logs: Path, tokens: int) -> Any:
    from lorafleet_standalone.processes import ReplicaPlan, vllm_process

    port = _free_port()
    replica = ReplicaPlan("zebra-merged-0", port, 0, 0, logs / run)
    extra = ["--enforce-eager"] if run == "eager" else []
    spec = pool.spec.model_copy(
        update={"engine": pool.spec.engine.model_copy(update={"extra_args": extra})}
    )
    proc_spec = vllm_process(replica, model_dir, spec, cpu=True, log_dir=logs)
    # The merge may have added --enforce-eager by default (standalone mode): these runs set
    # the flag themselves, so the compiled runs name vLLM's own default explicitly.
    argv = [a for a in proc_spec.argv if a != "--enforce-eager"]
    argv += ["--enforce-eager"] if run == "eager" else ["--no-enforce-eager"]
    env = {**os.environ, **proc_spec.env, "VLLM_CACHE_ROOT": str(cache)}
    url = f"http://127.0.0.1:{port}"
    log = (logs / f"{run}.log").open("w")
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(proc, url, log.name, poll_s=0.5)
        start_s = time.perf_counter() - started
        _complete(url, 8)
        first_s = time.perf_counter() - started
        t0 = time.perf_counter()
        done = sum(_complete(url, tokens) for _ in range(3))
        tok_1 = done / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(16) as ex:
            done = sum(ex.map(lambda _i: _complete(url, tokens), range(16)))
        tok_16 = done / (time.perf_counter() - t0)
        return {
            "run": run,
            "start_s": round(start_s, 1),
            "first_answer_s": round(first_s, 1),
            "tok_s_1": round(tok_1, 1),
            "tok_s_16": round(tok_16, 1),
            "argv_tail": argv[argv.index("--model") + 2 :],
        }
    finally:
        stop(proc)
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    runs = [r for r in args.runs.split(",") if r]
    if bad := [r for r in runs if r not in RUNS]:
        parser.error(f"unknown runs {bad}; known: {', '.join(RUNS)}")
    with tempfile.TemporaryDirectory(prefix="merged-engine-") as tmp:
        state = Path(tmp)
        model_dir, pool = _merged_model(state / "state")
        cache = state / "vllm-cache"  # fresh: the cold run fills it, the warm run reuses it
        logs = state / "logs"
        logs.mkdir()
        rows = []
        for run in runs:
            print(f"starting {run} ...", file=sys.stderr, flush=True)
            rows.append(measure(run, model_dir, pool, cache, logs, args.tokens))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| run | start to /health | to first answer | tok/s, 1 stream | tok/s, 16 streams |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['run']} | {r['start_s']} s | {r['first_answer_s']} s | {r['tok_s_1']} | "
            f"{r['tok_s_16']} |"
        )
    print(f"\ncommand: {shlex.join([sys.executable, *sys.argv])}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
