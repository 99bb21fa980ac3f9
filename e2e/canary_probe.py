"""Probe every alias through the gateway on a fixed beat; say which adapter version answered.

    .venv/bin/python -m e2e.canary_probe --manifests .lorafleet/manifests --interval 2 --duration 60
    .venv/bin/python -m e2e.canary_probe --base-url https://gw.example/v1 --api-key-file key \\
        --markers acme/support:prod=ACME-CANARY --rounds 30

Each round sends one short streaming request per alias (temperature 0) and prints the marker
check, TTFT, `x-adapter-id`, `x-adapter-tier` and `x-replica-id`; a change of `x-adapter-id`
for an alias is printed as `SWITCH` (a deploy or rollback reaching clients). Exit status: 0
ok, 1 a wrong marker or errors above `--max-error-rate`, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from e2e.client import (
    DEFAULT_BASE_URL,
    make_client,
    read_api_key,
    reproduce_command,
    stream_chat,
)
from e2e.markers import markers_from_manifests, parse_marker_args
from e2e.results import RequestResult, percentile

PROMPT = "Tell me about the weather today"


@dataclass
class AliasTally:
    hits: int = 0
    misses: int = 0
    unchecked: int = 0
    errors: int = 0
    ttfts: list[float] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)  # distinct, in the order seen
    switches: int = 0
    tiers: dict[str, int] = field(default_factory=dict)

    @property
    def probes(self) -> int:
        return self.hits + self.misses + self.unchecked + self.errors


def record(tally: AliasTally, res: RequestResult) -> str | None:
    """Count one probe; returns a SWITCH line when the serving adapter changed."""
    if not res.ok:
        tally.errors += 1
        return None
    if res.marker_ok is None:
        tally.unchecked += 1
    elif res.marker_ok:
        tally.hits += 1
    else:
        tally.misses += 1
    if res.ttft_s is not None:
        tally.ttfts.append(res.ttft_s)
    tier = res.tier or "?"
    tally.tiers[tier] = tally.tiers.get(tier, 0) + 1
    switch = None
    if res.adapter_id and (not tally.adapters or tally.adapters[-1] != res.adapter_id):
        if tally.adapters:
            tally.switches += 1
            switch = f"SWITCH {res.alias}: {tally.adapters[-1]} -> {res.adapter_id}"
        tally.adapters.append(res.adapter_id)
    return switch


def probe_line(res: RequestResult, t: float) -> str:
    mark = {True: "hit ", False: "MISS", None: "-   "}[res.marker_ok]
    if not res.ok:
        return f"{t:7.1f}s {res.alias:<24} ERROR {res.status} {res.error[:80]}"
    return (
        f"{t:7.1f}s {res.alias:<24} {mark} ttft {1000 * (res.ttft_s or 0):6.0f} ms  "
        f"adapter {res.adapter_id}  tier {res.tier}  replica {res.replica}  {res.text[:24]!r}"
    )


def format_report(tallies: dict[str, AliasTally]) -> str:
    lines = [
        f"{'alias':<24}{'probes':>7}{'hits':>6}{'miss':>6}{'err':>5}{'p50 ms':>8}{'p95 ms':>8}"
        "  adapters seen (switches)  tiers"
    ]
    for alias, t in tallies.items():
        p50, p95 = percentile(t.ttfts, 0.5), percentile(t.ttfts, 0.95)
        tiers = " ".join(f"{k}:{v}" for k, v in sorted(t.tiers.items()))
        lines.append(
            f"{alias:<24}{t.probes:>7}{t.hits:>6}{t.misses:>6}{t.errors:>5}"
            f"{'-' if p50 is None else f'{p50 * 1000:.0f}':>8}"
            f"{'-' if p95 is None else f'{p95 * 1000:.0f}':>8}"
            f"  {' -> '.join(t.adapters) or '-'} ({t.switches})  {tiers}"
        )
    return "\n".join(lines)


def verdict(tallies: dict[str, AliasTally], max_error_rate: float) -> int:
    probes = sum(t.probes for t in tallies.values())
    errors = sum(t.errors for t in tallies.values())
    if probes == 0 or any(t.misses for t in tallies.values()):
        return 1
    return 1 if errors / probes > max_error_rate else 0


async def probe(
    *,
    base_url: str,
    api_key: str,
    markers: dict[str, str | None],
    interval_s: float,
    rounds: int,
    duration_s: float,
    max_tokens: int,
    timeout_s: float,
    out: list[str] | None = None,
) -> dict[str, AliasTally]:
    """Up to `rounds` rounds, one every `interval_s`, stopping after `duration_s`."""
    client = make_client(base_url, api_key, timeout_s)
    tallies = {alias: AliasTally() for alias in markers}
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(line, flush=True)
        if out is not None:
            out.append(line)

    try:
        for n in range(rounds):
            start = t0 + n * interval_s
            if start - t0 > duration_s:
                break
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
            results = await asyncio.gather(
                *(
                    stream_chat(
                        client,
                        index=n,
                        alias=alias,
                        prompt=PROMPT,
                        max_tokens=max_tokens,
                        marker=marker,
                        scheduled_at=start - t0,
                        run_t0=t0,
                    )
                    for alias, marker in markers.items()
                )
            )
            for res in results:
                say(probe_line(res, res.started_at))
                if (switch := record(tallies[res.alias], res)) is not None:
                    say(f"{res.started_at:7.1f}s {switch}")
    finally:
        await client.close()
    return tallies


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m e2e.canary_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--base-url", default=DEFAULT_BASE_URL)
    ap.add_argument("--api-key", default=None)
    ap.add_argument(
        "--api-key-file", type=Path, default=None, help="default .lorafleet/demo-api-key"
    )
    ap.add_argument("--manifests", type=Path, default=None, help="aliases and markers from here")
    ap.add_argument("--aliases", nargs="+", default=None, help="default: every alias found")
    ap.add_argument("--markers", nargs="*", default=[], metavar="ALIAS=MARKER")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between rounds")
    ap.add_argument("--rounds", type=int, default=1_000_000, help="most rounds")
    ap.add_argument("--duration", type=float, default=60.0, help="stop after this many seconds")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    ap.add_argument("--max-error-rate", type=float, default=0.0, help="above: exit 1")
    args = ap.parse_args(argv)
    try:
        found = markers_from_manifests(args.manifests) if args.manifests else {}
        given = parse_marker_args(args.markers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    known = found | given
    aliases = args.aliases or sorted(known)
    if not aliases:
        print("error: no aliases: pass --aliases, --markers or --manifests", file=sys.stderr)
        return 2
    markers: dict[str, str | None] = {a: known.get(a) for a in aliases}
    tallies = asyncio.run(
        probe(
            base_url=args.base_url,
            api_key=read_api_key(args.api_key, args.api_key_file),
            markers=markers,
            interval_s=args.interval,
            rounds=args.rounds,
            duration_s=args.duration,
            max_tokens=args.max_tokens,
            timeout_s=args.timeout,
        )
    )
    print()
    print(format_report(tallies))
    print(reproduce_command("e2e.canary_probe", sys.argv[1:] if argv is None else argv))
    return verdict(tallies, args.max_error_rate)


if __name__ == "__main__":
    sys.exit(main())
