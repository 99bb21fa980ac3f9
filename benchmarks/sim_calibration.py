"""Calibrate `lorafleet sim` against the real stack: predicted vs measured TTFT and tier shares.

    # measure (real vLLM, a few minutes; run it alone on the machine)
    .venv/bin/python benchmarks/sim_calibration.py --measure
    # the simulator side again from the recorded run (no vLLM, seconds)
    .venv/bin/python benchmarks/sim_calibration.py --from bench-results/calibration/measured.json
    # the committed runs (docs/design/0012-simulator-calibration.md), gzip read as is
    .venv/bin/python benchmarks/sim_calibration.py \
        --from benchmarks/calibration/pinned-2026-12-01.json.gz

`--measure` does, in order:
1. `benchmarks/agent_tier_ttft.py` (its own vLLM, 2 GPU / 4 RAM slots): median TTFT per
   tier; load time of a tier = its median minus the GPU median.
2. A throwaway `lorafleet up` as the load test starts it (`e2e.standalone_fleet`: 1 replica,
   gpuSlots 2, hostRamSlots 4, the 3 demo canaries + 3 copies each = 12 aliases), its
   processes put on their cores (`--layout`, `benchmarks.calibration_layout`: `pinned`, the
   default, gives vLLM's engine one core and the request path the other, as a GPU node keeps
   the engine's compute off the host's cores; `shared` leaves them as `lorafleet up` does), then the
   probes of `benchmarks.calibration_probes` (prefill rate and request path, time per output
   token at batch 1/2/4/8/16) and `benchmarks.calibration_host_probe` (CPU seconds of the
   request path's processes per request and per streamed token, the engine's CPU while it
   steps: the host CPU model's inputs) and `benchmarks.calibration_stall_probe` (how often
   and how long a hop stops, under a paced load of its own: over 3 aliases, over all 12, and
   over 3 beside requests that keep the engine stepping), then for each of `--rates` the
   probes again and a trace replay
   (the load test's plan, `lorafleet_loadtest.plan`: Zipf(`--zipf`) over the 12 aliases,
   lengths scaled to the demo's 256-token context), recording TTFT and `x-adapter-tier` per request.
3. Every planned prompt is tokenized with the demo model's tokenizer and chat template (what
   vLLM counts), so the simulator gets the engine's token counts, not the planner's estimate.

Then, for each replay, `lorafleet sim` runs the same requests (`lorafleet_sim.calibration`:
same arrival times, same adapter per request, same token counts, one replica with the same
slots) with the measured parameters, and the side-by-side table, JSON and a CDF PNG are written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench-results" / "calibration"

from benchmarks.calibration_layout import LAYOUTS  # noqa: E402  (after the path insert)


def _tokenizer_counts(base_model: Path, prompts: list[str]) -> list[int]:
    """Prompt tokens as vLLM counts them: the model's tokenizer with its chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_model))
    counts = []
    for p in prompts:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        counts.append(len(ids))
    return counts


def _tiers(rounds: int) -> dict[str, Any]:
    path = Path(tempfile.mkdtemp()) / "tiers.json"
    cmd = [sys.executable, "-m", "benchmarks.agent_tier_ttft", "--rounds", str(rounds),
           "--out", str(path)]  # fmt: skip
    print(f"[calibration] {shlex.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    from benchmarks.results import load

    tiers: dict[str, Any] = load(path)["details"]
    return tiers


def _optional(probe: Any, *args: Any, **kw: Any) -> dict[str, Any] | None:
    """A probe whose failure leaves its model out (reported) rather than losing the run."""
    try:
        out: dict[str, Any] = probe(*args, **kw)
    except Exception as exc:
        print(f"[calibration] {probe.__name__} failed: {exc!r}", file=sys.stderr, flush=True)
        return None
    return out


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import yaml

    from benchmarks.calibration_host_probe import FleetProcesses, probe_host
    from benchmarks.calibration_layout import apply_layout
    from benchmarks.calibration_probes import (
        TOKENS_PER_WORD,
        load_average,
        probe_decode,
        probe_prefill,
        replay,
    )
    from benchmarks.calibration_stall_probe import GcRecorder, fleet_endpoints, probe_stalls
    from e2e.standalone_fleet import FleetOptions, started_fleet
    from lorafleet_loadtest.driver import Target
    from lorafleet_loadtest.plan import LengthLimits, ReplaySpec, plan_replay, prompt_text
    from lorafleet_loadtest.probe.markers import alias_targets

    doc: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    doc["loadavg_start"] = load_average()
    doc["tiers"] = _tiers(args.tier_rounds) if args.tier_rounds else None
    opts = FleetOptions(replicas=1, gpu_slots=2, host_ram_slots=4, copies=3)
    doc["fleet"] = {"replicas": 1, "gpu_slots": 2, "host_ram_slots": 4, "aliases": 12}
    limits = LengthLimits()
    with started_fleet(opts) as fleet:
        target = Target(fleet.base_url, fleet.api_key, {}, aliases=tuple(fleet.aliases))
        up = json.loads((fleet.state_dir / "up.json").read_text())
        vllm_url = up["replicas"][0]["vllmUrl"]
        pool = yaml.safe_load((fleet.manifests / "replicapool-demo.yaml").read_text())
        base_model = Path(pool["spec"]["baseModel"]["uri"].removeprefix("file://"))
        doc["alias_adapter"] = alias_targets(fleet.manifests)
        doc["aliases"] = fleet.aliases
        vlog = next(iter(sorted((fleet.state_dir / "logs").glob("*-vllm.log"))), fleet.state_dir)
        roles = FleetProcesses.of(fleet.proc.pid).roles
        doc["layout"] = apply_layout(
            args.layout, {r: [p.pid for p in ps] for r, ps in roles.items()}
        )
        print(f"[calibration] layout {doc['layout']}", file=sys.stderr, flush=True)
        print("[calibration] probes", file=sys.stderr, flush=True)
        doc["loadavg_probes"] = load_average()
        doc["prefill"] = probe_prefill(target, vllm_url)
        doc["decode"] = probe_decode(target, vllm_url)
        doc["host"] = _optional(probe_host, target, vllm_url, fleet.proc.pid)
        doc["stalls"] = _optional(
            probe_stalls, target, fleet_endpoints(up), duration_s=args.stall_s
        )
        # Again over all 12 aliases, more than the 4 RAM slots: the stops adapter loads add.
        doc["load_stalls"] = _optional(
            probe_stalls,
            target,
            fleet_endpoints(up),
            duration_s=args.stall_s,
            aliases=len(fleet.aliases),
        )
        # Again beside long requests that keep the engine stepping: the stops busy time adds.
        doc["busy_stalls"] = _optional(
            probe_stalls, target, fleet_endpoints(up), duration_s=args.stall_s, busy=True
        )
        doc["replays"] = []
        pending: list[tuple[list[dict[str, Any]], list[Any], list[str]]] = []
        for rate in args.rates:
            # Probed again right before each replay: on a machine shared with other jobs the
            # engine's and the path's speed drift within minutes (load average in the JSON).
            probes = {
                "loadavg": load_average(),
                "prefill": probe_prefill(target, vllm_url, reps=4),
                "decode": probe_decode(target, vllm_url, reps=2),
                "host": _optional(probe_host, target, vllm_url, fleet.proc.pid, requests=16),
            }
            # The trace's first rate x duration requests, compressed to offer exactly `rate`
            # (the same requests and aliases as the seed's Zipf draw always gives).
            spec = ReplaySpec(args.trace, rate, args.duration, args.max_requests, args.zipf,
                              args.seed)  # fmt: skip
            plan = plan_replay(spec, fleet.aliases, limits)
            prompts = [prompt_text(p.prompt_tokens, p.index, TOKENS_PER_WORD) for p in plan]
            print(f"[calibration] replay {len(plan)} requests at {rate:g} req/s",
                  file=sys.stderr, flush=True)  # fmt: skip
            load_before = load_average()
            with GcRecorder() as client_gc:  # diagnostics: the load client's own stops
                rows, elapsed, engine = replay(target, plan, vllm_url)
            pending.append((rows, plan, prompts))
            doc["replays"].append(
                {
                    "rate": rate,
                    "workload": spec.describe(len(fleet.aliases)),
                    "duration_s": args.duration,
                    "elapsed_s": elapsed,
                    "loadavg_before": load_before,
                    "loadavg_after": load_average(),
                    "engine": engine,
                    "probes": probes,
                    "client_gc": [[t, g, d] for t, g, d in client_gc.events if d >= 0.005],
                    "requests": rows,
                }
            )
        # Tokenized after every replay: importing transformers grows the client's heap
        # several-fold, and its full collections then stop the load client for 100+ ms
        # (the 5 req/s replay of the earlier quiet run was sent that way).
        for rows, plan, prompts in pending:
            engine_tokens = _tokenizer_counts(base_model, prompts)
            for row, p, n, text in zip(rows, plan, engine_tokens, prompts, strict=True):
                row.update(
                    planned_prompt_tokens=p.prompt_tokens,
                    max_tokens=p.max_tokens,
                    engine_prompt_tokens=n,
                    char4_tokens=max(1, len(text) // 4),
                    adapter=doc["alias_adapter"][p.alias],
                )
        doc["vllm_log_head"] = (
            [
                line
                for line in vlog.read_text(errors="replace").splitlines()
                if "max_num" in line or "chunked" in line.lower() or "max_loras" in line
            ][:10]
            if vlog.is_file()
            else []
        )
    doc["loadavg_end"] = load_average()
    doc["command"] = "benchmarks/sim_calibration.py " + shlex.join(sys.argv[1:])
    return doc


def read_measured(path: Path) -> dict[str, Any]:
    """A measured JSON as `--measure` wrote it, or gzip-compressed (`.gz`, as the runs the design
    records cite are kept in benchmarks/calibration/)."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    doc: dict[str, Any] = json.loads(raw)
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="run the real stack (vLLM)")
    ap.add_argument(
        "--from", dest="from_", type=Path, default=None, help="a measured JSON (or .json.gz)"
    )
    ap.add_argument("--rates", type=float, nargs="+", default=[2.0, 5.0])
    ap.add_argument("--duration", type=float, default=90.0, help="seconds of trace per rate")
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", type=Path, default=None)
    ap.add_argument("--tier-rounds", type=int, default=5, help="agent_tier_ttft rounds (0: skip)")
    ap.add_argument("--measure-from", type=float, default=10.0, help="s left out on both sides")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a derived simulator parameter")  # fmt: skip
    ap.add_argument("--host-probe", type=Path, default=None,
                    help="a host probe JSON for a file without one")  # fmt: skip
    ap.add_argument("--busy-from", type=Path, default=None,
                    help="the busy-engine stall run from another measured JSON (its "
                    "busy_stalls, else its stalls run beside a sentinel stream)")  # fmt: skip
    ap.add_argument("--stall-s", type=float, default=30.0, help="seconds of the stall probe")
    ap.add_argument("--no-host", action="store_true",
                    help="leave the host CPU model out (path_s constant, as before)")  # fmt: skip
    ap.add_argument("--layout", choices=LAYOUTS, default="pinned",
                    help="pinned: vLLM's engine on one core, the path on the others (a GPU "
                    "node's layout); shared: as lorafleet up leaves it")  # fmt: skip
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.trace is None:
        from benchmarks.workload import DEFAULT_TRACE

        args.trace = DEFAULT_TRACE
    args.out.mkdir(parents=True, exist_ok=True)
    if args.measure:
        doc = measure(args)
        path = args.out / "measured.json"
        path.write_text(json.dumps(doc, indent=1))
        print(f"[calibration] wrote {path}", file=sys.stderr)
    elif args.from_ is not None:
        doc = read_measured(args.from_)
    else:
        ap.error("pass --measure or --from FILE")
    if args.host_probe is not None:
        doc["host"] = read_measured(args.host_probe)
        doc["host_probe_from"] = str(args.host_probe)
    if args.busy_from is not None:
        other = read_measured(args.busy_from)
        doc["busy_stalls"] = other.get("busy_stalls") or other["stalls"]
        if "busy" not in doc["busy_stalls"] and "sentinel" not in doc["busy_stalls"]:
            ap.error(f"{args.busy_from}: no stall run beside a busy engine")
        doc["busy_stalls_from"] = str(args.busy_from)
    if args.no_host:
        doc.pop("host", None)
        doc.pop("stalls", None)
        for rep in doc["replays"]:
            rep.get("probes", {}).pop("host", None)
    from benchmarks.sim_calibration_report import report

    return report(doc, args)


if __name__ == "__main__":
    sys.exit(main())
