"""Drive a running lorafleet with the production trace and measure what clients see.

    .venv/bin/python -m e2e.loadtest --start --duration 90          # own `lorafleet up`
    .venv/bin/python -m e2e.loadtest --base-url http://127.0.0.1:8080/v1 \\
        --api-key-file .lorafleet/demo-api-key --manifests .lorafleet/manifests

Arrivals and lengths come from the Azure conversation trace (`benchmarks.workload`),
time-compressed to `--rate` requests/s; each request goes to an alias drawn from Zipf(`--zipf`)
over `--aliases` (first = hottest) with `--seed`. Lengths are scaled to what the target serves
(`--max-prompt-tokens`, `--max-output-tokens`, `--max-model-len`; see e2e/loadplan.py). Every
request is a streaming chat completion through the official `openai` client; answers are
checked for the alias's canary marker. Exit status: 0 ok, 1 a marker mismatch or errors above
`--max-error-rate`, 2 bad arguments or the fleet did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from benchmarks.workload import WorkloadSpec
from e2e.loadplan import LengthLimits, PlannedRequest, native_rate, plan_workload, prompt_text
from e2e.plots import write_plots
from e2e.standalone_fleet import FleetOptions, started_fleet
from lorafleet_cli.probe.client import (
    DEFAULT_BASE_URL,
    make_client,
    read_api_key,
    reproduce_command,
    stream_chat,
)
from lorafleet_cli.probe.markers import markers_from_manifests, parse_marker_args
from lorafleet_cli.probe.results import RequestResult, Summary, format_summary, summarize


@dataclass(frozen=True)
class Target:
    base_url: str
    api_key: str
    aliases: list[str]
    markers: dict[str, str]


async def run_load(
    target: Target,
    plan: list[PlannedRequest],
    *,
    concurrency: int,
    timeout_s: float,
    tokens_per_word: float,
    progress: bool = True,
) -> tuple[list[RequestResult], float]:
    """Send each planned request at its time (open loop, at most `concurrency` in flight)."""
    client = make_client(target.base_url, target.api_key, timeout_s)
    gate = asyncio.Semaphore(concurrency)
    bar = tqdm(total=len(plan), unit="req", disable=not progress, mininterval=0.5)
    t0 = time.perf_counter()

    async def one(req: PlannedRequest) -> RequestResult:
        await asyncio.sleep(max(0.0, req.at - (time.perf_counter() - t0)))
        async with gate:
            res = await stream_chat(
                client,
                index=req.index,
                alias=req.alias,
                prompt=prompt_text(req.prompt_tokens, req.index, tokens_per_word),
                max_tokens=req.max_tokens,
                marker=target.markers.get(req.alias),
                scheduled_at=req.at,
                run_t0=t0,
            )
        bar.update(1)
        if not res.ok:
            bar.set_postfix_str(f"last error {res.status}", refresh=False)
        return res

    try:
        results = await asyncio.gather(*(one(r) for r in plan))
    finally:
        bar.close()
        await client.close()
    return list(results), time.perf_counter() - t0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m e2e.loadtest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t = ap.add_argument_group("target")
    t.add_argument("--base-url", default=DEFAULT_BASE_URL, help="gateway's OpenAI base URL")
    t.add_argument("--api-key", default=None, help="tenant API key (else --api-key-file)")
    t.add_argument(
        "--api-key-file", type=Path, default=None, help="default: .lorafleet/demo-api-key"
    )
    t.add_argument(
        "--aliases", nargs="+", default=None, help="models to load, hottest first (default: "
        "the aliases in --manifests)"
    )  # fmt: skip
    t.add_argument("--manifests", type=Path, default=None, help="read aliases and markers here")
    t.add_argument(
        "--markers", nargs="*", default=[], metavar="ALIAS=MARKER", help="expected markers"
    )
    s = ap.add_argument_group("--start: run a throwaway `lorafleet up` (stopped at the end)")
    s.add_argument("--start", action="store_true")
    s.add_argument("--replicas", type=int, default=1)
    s.add_argument("--gpu-slots", type=int, default=2, help="pool engine.gpuSlots (--max-loras)")
    s.add_argument("--host-ram-slots", type=int, default=4, help="engine.hostRamSlots")
    s.add_argument("--copies", type=int, default=3, help="extra versions+aliases per canary")
    s.add_argument("--keep-state", action="store_true", help="keep the temporary state folder")
    w = ap.add_argument_group("workload")
    w.add_argument("--trace", type=Path, default=WorkloadSpec.trace)
    w.add_argument("--rate", type=float, default=2.0, help="offered requests/s (trace compressed)")
    w.add_argument("--zipf", type=float, default=1.0)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--duration", type=float, default=60.0, help="seconds of trace to send")
    w.add_argument("--max-requests", type=int, default=500)
    w.add_argument("--concurrency", type=int, default=32, help="most requests in flight")
    w.add_argument("--timeout", type=float, default=120.0, help="per request, seconds")
    w.add_argument("--max-prompt-tokens", type=int, default=64)
    w.add_argument("--max-output-tokens", type=int, default=32)
    w.add_argument(
        "--min-output-tokens", type=int, default=8, help="floor, so the marker fits (demo: 8)"
    )
    w.add_argument("--max-model-len", type=int, default=256, help="the target's vLLM limit")
    w.add_argument("--length-mode", choices=("scale", "cap"), default="scale")
    w.add_argument(
        "--tokens-per-word", type=float, default=2.4, help="prompt words per token (demo: 2.4)"
    )
    o = ap.add_argument_group("output")
    o.add_argument("--plot", type=Path, default=Path("bench-results/loadtest.png"))
    o.add_argument("--max-error-rate", type=float, default=0.05, help="above: exit 1")
    o.add_argument("--no-progress", action="store_true")
    return ap


@contextlib.contextmanager
def resolve_target(args: argparse.Namespace) -> Iterator[Target]:
    markers = parse_marker_args(args.markers)
    if args.start:
        opts = FleetOptions(
            replicas=args.replicas,
            gpu_slots=args.gpu_slots,
            host_ram_slots=args.host_ram_slots,
            copies=args.copies,
            keep_state=args.keep_state,
        )
        with started_fleet(opts) as fleet:
            found = markers_from_manifests(fleet.manifests)
            yield Target(
                fleet.base_url, fleet.api_key, args.aliases or fleet.aliases, found | markers
            )
        return
    found = markers_from_manifests(args.manifests) if args.manifests else {}
    aliases = args.aliases or sorted(found)
    if not aliases:
        raise SystemExit("no aliases: pass --aliases or --manifests")
    yield Target(
        args.base_url, read_api_key(args.api_key, args.api_key_file), aliases, found | markers
    )


def describe(
    args: argparse.Namespace, spec: WorkloadSpec, target: Target, limits: LengthLimits
) -> str:
    return (
        f"{spec.describe()} (offered ~{args.rate:g} req/s) | Zipf over {len(target.aliases)} "
        f"aliases, hottest first: {', '.join(target.aliases[:6])}"
        f"{', ...' if len(target.aliases) > 6 else ''} | lengths: {limits.mode} to prompt <= "
        f"{limits.max_prompt_tokens}, output <= {limits.max_output_tokens} tokens"
    )


def exit_code(summary: Summary, max_error_rate: float) -> int:
    if summary.mismatches or summary.requests == 0:
        return 1
    return 1 if summary.error_rate > max_error_rate else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        limits = LengthLimits(
            args.max_prompt_tokens, args.max_output_tokens, args.max_model_len,
            min_output_tokens=args.min_output_tokens, mode=args.length_mode,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = reproduce_command("e2e.loadtest", sys.argv[1:] if argv is None else argv)
    try:
        with resolve_target(args) as target:
            base = WorkloadSpec(args.trace, 1.0, len(target.aliases), args.zipf, args.seed)
            # Calibrate on the stretch of trace the run will send (the trace's first minutes
            # are sparser than its average), so `--rate` is what is offered.
            sample = max(2, min(args.max_requests, math.ceil(args.rate * args.duration) + 1))
            speedup = args.rate / native_rate(base, sample)
            spec = WorkloadSpec(args.trace, speedup, len(target.aliases), args.zipf, args.seed)
            plan = plan_workload(
                spec=spec,
                aliases=target.aliases,
                limits=limits,
                max_requests=args.max_requests,
                duration_s=args.duration,
            )
            title = describe(args, spec, target, limits)
            print(title)
            known = sum(a in target.markers for a in target.aliases)
            print(f"target: {target.base_url}  markers known for {known}/{len(target.aliases)}")
            results, elapsed = asyncio.run(
                run_load(
                    target,
                    plan,
                    concurrency=args.concurrency,
                    timeout_s=args.timeout,
                    tokens_per_word=args.tokens_per_word,
                    progress=not args.no_progress,
                )
            )
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Offered rate over the window the plan covers: the whole --duration, unless
    # --max-requests cut the trace short.
    span = plan[-1].at if len(plan) >= args.max_requests else args.duration
    summary = summarize(results, elapsed, span)
    print(format_summary(summary))
    path = write_plots(results, args.plot, title)
    print(f"plot: {path}")
    print(command)
    return exit_code(summary, args.max_error_rate)


if __name__ == "__main__":
    sys.exit(main())
