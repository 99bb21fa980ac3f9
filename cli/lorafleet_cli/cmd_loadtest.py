"""`lorafleet loadtest`: replay the production trace through a gateway and measure what clients see.

    lorafleet loadtest --gateway http://127.0.0.1:8080 --key-file .lorafleet/demo-api-key \\
        --rates 1,2,4 --duration 60 --out bench-results/loadtest
    lorafleet loadtest --gateway URL --key-file F --overhead --adapter-counts 1,8,32 \\
        --engine http://127.0.0.1:8000 --engine-key-file vllm-key      # base-model row
    lorafleet loadtest --compare affinity/loadtest.json random/loadtest.json --out cmp

Replay: the trace's arrivals and lengths (../shared/traces, $LORAFLEET_TRACE or --trace: any
CSV with TIMESTAMP, ContextTokens, GeneratedTokens) time-compressed to each offered rate, each
request sent to an alias drawn from Zipf(--zipf) over the aliases, hottest first. Figures per
rate: p50/p95/p99 TTFT and time per output token by tier (`x-adapter-tier`), p95 per alias,
errors and 429s. --overhead: throughput with k distinct adapters per batch (and the base model
with --engine). --compare: two or more result files side by side (affinity vs random routing:
run once per gateway setting, with --label). Outputs in --out: loadtest.json, loadtest.md, PNGs.

Exit 0: every run answered within --max-error-rate and no canary marker was wrong; 1: a wrong
marker, too many errors, nothing answered, or the deployment lacks what was asked (aliases);
2: bad arguments, an unreadable key, trace or result file. The key is read from --key-file (or
$LORAFLEET_API_KEY), never from the command line, and is never written anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from lorafleet_cli.arg_options import options_from_args
from lorafleet_cli.exit_codes import FAILURE, USAGE, fail
from lorafleet_loadtest import overhead as oh
from lorafleet_loadtest import report, session
from lorafleet_loadtest.driver import Target, list_models
from lorafleet_loadtest.plan import LengthLimits
from lorafleet_loadtest.probe.client import DEFAULT_KEY_FILE, base_url, manifests_for, read_key
from lorafleet_loadtest.probe.markers import markers_from_manifests, parse_marker_args
from lorafleet_loadtest.stats import verdict
from lorafleet_sim.workload import default_trace

# Option fields named otherwise than their flags (arg_options.options_from_args).
SWEEP_ARGS = {"duration_s": "duration", "zipf_s": "zipf", "timeout_s": "timeout"}
OVERHEAD_ARGS = {
    "counts": "adapter_counts",
    "concurrency": "overhead_concurrency",
    "duration_s": "overhead_duration",
    "max_tokens": "overhead_max_tokens",
    "prompt_tokens": "overhead_prompt_tokens",
    "timeout_s": "timeout",
    "rounds": "overhead_rounds",
}


def _numbers(kind: type, text: str) -> list[Any]:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list: {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"want positive values, got {text!r}")
    return values


def register(sub: Any) -> None:
    p = sub.add_parser(
        "loadtest",
        help="replay the production trace through a gateway: TTFT by tier, rate sweep, "
        "adapter overhead, routing comparison",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t = p.add_argument_group("target")
    t.add_argument(
        "--gateway",
        default="http://127.0.0.1:8080",
        help="gateway URL (/v1 optional; default: lorafleet up's, %(default)s)",
    )
    t.add_argument("--key-file", type=Path, default=None, help=f"default {DEFAULT_KEY_FILE}")
    t.add_argument(
        "--aliases",
        nargs="+",
        default=None,
        help="models to load, hottest first (default: --manifests, else every "
        "model the gateway lists for the key)",
    )
    t.add_argument(
        "--manifests",
        type=Path,
        default=None,
        help="aliases and markers from here (default: .lorafleet/manifests "
        "for lorafleet up's gateway)",
    )
    t.add_argument("--markers", nargs="*", default=[], metavar="ALIAS=MARKER")
    t.add_argument("--label", default="", help="names this run in its results (e.g. the policy)")
    w = p.add_argument_group("replay")
    w.add_argument(
        "--rates",
        type=lambda v: _numbers(float, v),
        default=[2.0],
        help="offered requests/s, comma-separated: one run each (default 2)",
    )
    w.add_argument("--duration", type=float, default=60.0, help="seconds of trace per rate (60)")
    w.add_argument("--max-requests", type=int, default=2000, help="per rate (2000)")
    w.add_argument("--trace", type=Path, default=None, help="default $LORAFLEET_TRACE or shared")
    w.add_argument("--zipf", type=float, default=1.0, help="alias popularity skew (1.0)")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--concurrency", type=int, default=64, help="most requests in flight (64)")
    w.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    w.add_argument("--max-prompt-tokens", type=int, default=64)
    w.add_argument("--max-output-tokens", type=int, default=32)
    w.add_argument("--min-output-tokens", type=int, default=8, help="room for a canary marker")
    w.add_argument("--max-model-len", type=int, default=256, help="the target's vLLM limit")
    w.add_argument("--length-mode", choices=("scale", "cap"), default="scale")
    w.add_argument(
        "--tokens-per-word",
        type=float,
        default=2.4,
        help="prompt tokens per word (demo vocabulary 2.4; real BPE ~1.3)",
    )
    o = p.add_argument_group("--overhead: throughput by distinct adapters per batch")
    o.add_argument("--overhead", action="store_true", help="run the overhead rows, not a replay")
    o.add_argument("--adapter-counts", type=lambda v: _numbers(int, v), default=[1, 8, 32])
    o.add_argument(
        "--engine",
        default=None,
        help="an OpenAI-compatible engine URL serving the base model (base row)",
    )
    o.add_argument(
        "--engine-key-file",
        type=Path,
        default=None,
        help="its API key (default $LORAFLEET_ENGINE_KEY, else none)",
    )
    o.add_argument(
        "--engine-direct",
        action="store_true",
        help="send the adapter rows to --engine too, by the adapter ids the gateway answers "
        "with (engine-only overhead, without gateway and agent in the path)",
    )
    o.add_argument(
        "--overhead-duration", type=float, default=10.0, help="seconds per row and round (10)"
    )
    o.add_argument(
        "--overhead-rounds",
        type=int,
        default=3,
        help="rounds interleaving the rows, medians reported (3)",
    )
    o.add_argument("--overhead-concurrency", type=int, default=32)
    o.add_argument("--overhead-max-tokens", type=int, default=64)
    o.add_argument("--overhead-prompt-tokens", type=int, default=32)
    c = p.add_argument_group("--compare: result files side by side")
    c.add_argument("--compare", nargs="+", type=Path, default=None, metavar="RESULT_JSON")
    r = p.add_argument_group("output")
    r.add_argument("--out", type=Path, default=Path("bench-results/loadtest"), help="folder")
    r.add_argument("--max-error-rate", type=float, default=0.05, help="above this: exit 1")
    r.add_argument("--no-plots", action="store_true")
    r.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.compare is not None:
        return compare(args)
    if (
        min(args.duration, args.timeout, args.overhead_duration) <= 0
        or min(
            args.max_requests, args.concurrency, args.overhead_concurrency, args.overhead_max_tokens
        )
        < 1
    ):
        return fail("durations, timeouts, counts and concurrency must be positive", USAGE)
    try:
        limits = LengthLimits(
            args.max_prompt_tokens,
            args.max_output_tokens,
            args.max_model_len,
            min_output_tokens=args.min_output_tokens,
            mode=args.length_mode,
        )
        key = read_key(args.key_file)
        # An engine may run without a key (vLLM without --api-key); the demo key is no default.
        engine_key = (
            read_key(args.engine_key_file)
            if args.engine_key_file
            else os.environ.get("LORAFLEET_ENGINE_KEY", "").strip()
        )
        manifests = manifests_for(args.gateway, args.manifests)
        found = markers_from_manifests(manifests) if manifests else {}
        markers = found | parse_marker_args(args.markers)
        trace = args.trace or default_trace()
        if not args.overhead and not trace.is_file():
            raise ValueError(f"no trace at {trace} (pass --trace or set $LORAFLEET_TRACE)")
    except ValueError as exc:
        return fail(exc, USAGE)
    if args.engine_direct and not args.engine:
        return fail("--engine-direct needs --engine", USAGE)
    url = base_url(args.gateway)
    aliases = args.aliases or sorted(found)
    if not aliases:
        try:
            aliases = asyncio.run(list_models(url, key, args.timeout))
        except Exception as exc:  # the openai client's connection and status errors
            return fail(f"cannot list the gateway's models at {url}: {exc}")
    if not aliases:
        return fail(f"{url} lists no models for this key: pass --aliases")
    # The key only ever comes from a file or the environment, so argv is safe to record.
    command = "lorafleet " + shlex.join(getattr(args, "cli_argv", sys.argv[1:]))
    meta = session.run_meta(args.label, command, url, aliases, markers)
    target = Target(url, key, markers)
    plot = not args.no_plots
    progress = not args.no_progress
    runs: list[Any] = []
    overhead_doc = None
    try:
        if args.overhead:
            if why := oh.missing_aliases(args.adapter_counts, len(aliases)):
                return fail(why)
            overhead_doc = session.run_overhead(
                url,
                key,
                aliases,
                options_from_args(
                    session.OverheadOptions,
                    args,
                    OVERHEAD_ARGS,
                    engine_url=args.engine and base_url(args.engine),
                    engine_key=engine_key or "none",
                    progress=progress,
                ),
            )
        else:
            sweep = options_from_args(
                session.SweepOptions,
                args,
                SWEEP_ARGS,
                trace=trace,
                limits=limits,
                progress=progress,
            )
            meta |= session.sweep_meta(sweep)
            runs = session.run_sweep(target, aliases, sweep, args.out, plot)
    except (RuntimeError, OSError) as exc:
        return fail(exc, FAILURE)
    meta["load_average_after"] = session.load_average()
    doc = report.document(meta, [d for _, d in runs], overhead_doc)
    written = session.write_outputs(doc, args.out, plot)
    print()
    print(report.markdown(doc))
    print("wrote " + ", ".join(str(p) for p in written))
    if args.overhead:
        rows = overhead_doc["rows"] if overhead_doc else []
        return 0 if oh.rows_passed(rows, args.max_error_rate) else FAILURE
    return verdict([s for s, _ in runs], args.max_error_rate)


def compare(args: argparse.Namespace) -> int:
    if len(args.compare) < 2:
        return fail("--compare wants at least two result files", USAGE)
    try:
        docs = [report.read_document(p) for p in args.compare]
    except ValueError as exc:
        return fail(exc, USAGE)
    text, written = session.write_comparison(docs, args.out, not args.no_plots)
    print(text)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
