"""The canary probe: every alias through the gateway on a fixed beat; which adapter answered.

Each round sends one short streaming request per alias (temperature 0) and checks its canary
marker, TTFT, `x-adapter-id`, `x-adapter-tier` and `x-replica-id`; a change of `x-adapter-id`
for an alias is a `SWITCH` (a deploy or rollback reaching clients). `lorafleet canary`
(cmd_canary) is the command; `prometheus_textfile` writes the result for node_exporter's
textfile collector, labelled by alias and answering adapter id (never the key).

An alias with a weighted split in force is expected as {version: marker}: an answer passes only
when its `x-adapter-id` is a version in force and its text carries that version's own marker,
so neither the split's share of other versions raises a false alarm nor a wrong version (or a
version answering another's marker) goes unseen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from lorafleet_core.stats import percentile
from lorafleet_loadtest.probe.client import make_client, stream_chat
from lorafleet_loadtest.probe.results import RequestResult, marker_matches

PROMPT = "Tell me about the weather today"

# What an alias should answer: one marker whichever version serves (`--markers`), none known,
# or {version in force: its marker (None: unknown)} (from the manifests and the alias status).
Expected = str | Mapping[str, str | None] | None


@dataclass
class AliasTally:
    hits: int = 0
    misses: int = 0
    unchecked: int = 0
    errors: int = 0
    ttfts: list[float] = field(default_factory=list)
    adapters: list[str] = field(default_factory=list)  # distinct, in the order seen
    answered: dict[str, int] = field(default_factory=dict)  # adapter id -> successful probes
    switches: int = 0
    tiers: dict[str, int] = field(default_factory=dict)
    wrong: dict[str, int] = field(default_factory=dict)  # adapter id -> wrong or missing marker
    outside: set[str] = field(default_factory=set)  # answering versions not in force

    @property
    def probes(self) -> int:
        return self.hits + self.misses + self.unchecked + self.errors


def in_force(res: RequestResult, expected: Expected) -> bool | None:
    """Whether the version that answered is one the alias has in force (None: not known)."""
    if not isinstance(expected, Mapping):
        return None
    return res.adapter_id in expected


def check_version(res: RequestResult, expected: Expected) -> None:
    """Judge a split alias's answer by the version that served it (`x-adapter-id`)."""
    if not res.ok or not isinstance(expected, Mapping):
        return
    if res.adapter_id is None or res.adapter_id not in expected:
        res.marker_ok = False
        return
    res.marker_ok = marker_matches(
        res.text, expected[res.adapter_id], truncated=res.finish_reason == "length"
    )


def record(tally: AliasTally, res: RequestResult, expected: Expected = None) -> str | None:
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
        key = res.adapter_id or "?"
        tally.wrong[key] = tally.wrong.get(key, 0) + 1
    if in_force(res, expected) is False:
        tally.outside.add(res.adapter_id or "?")
    if res.ttft_s is not None:
        tally.ttfts.append(res.ttft_s)
    tier = res.tier or "?"
    tally.tiers[tier] = tally.tiers.get(tier, 0) + 1
    if res.adapter_id:
        tally.answered[res.adapter_id] = tally.answered.get(res.adapter_id, 0) + 1
    if isinstance(expected, Mapping):
        return None  # a split alias changes version by design: no SWITCH lines
    switch = None
    if res.adapter_id and (not tally.adapters or tally.adapters[-1] != res.adapter_id):
        if tally.adapters:
            tally.switches += 1
            switch = f"SWITCH {res.alias}: {tally.adapters[-1]} -> {res.adapter_id}"
        tally.adapters.append(res.adapter_id)
    return switch


def probe_line(res: RequestResult, t: float, expected: Expected = None) -> str:
    mark = {True: "hit ", False: "MISS", None: "-   "}[res.marker_ok]
    if not res.ok:
        return f"{t:7.1f}s {res.alias:<24} ERROR {res.status} {res.error[:80]}"
    why = " (version not in force)" if in_force(res, expected) is False else ""
    return (
        f"{t:7.1f}s {res.alias:<24} {mark} ttft {1000 * (res.ttft_s or 0):6.0f} ms  "
        f"adapter {res.adapter_id}{why}  tier {res.tier}  replica {res.replica}  "
        f"{res.text[:24]!r}"
    )


def served_line(t: AliasTally) -> str:
    """Probes by version served: `v1 12 ok, v2 8 (8 wrong), v3 2 (not in force)`."""
    parts = []
    for version in sorted(set(t.answered) | set(t.wrong)):
        n, wrong = t.answered.get(version, 0), t.wrong.get(version, 0)
        note = "not in force" if version in t.outside else f"{wrong} wrong" if wrong else "ok"
        parts.append(f"{version} {n} ({note})")
    return ", ".join(parts) or "-"


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
        lines.append(f"{'':<24}served by version: {served_line(t)}")
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
    markers: Mapping[str, Expected],
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
                        marker=marker if not isinstance(marker, Mapping) else None,
                        scheduled_at=start - t0,
                        run_t0=t0,
                    )
                    for alias, marker in markers.items()
                )
            )
            for res in results:
                expected = markers[res.alias]
                check_version(res, expected)
                say(probe_line(res, res.started_at, expected))
                if (switch := record(tallies[res.alias], res, expected)) is not None:
                    say(f"{res.started_at:7.1f}s {switch}")
    finally:
        await client.close()
    return tallies


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_textfile(tallies: dict[str, AliasTally], exit_code: int, now: float) -> str:
    """The run in Prometheus text format (node_exporter textfile collector): per alias probes by
    result, per (alias, answering adapter id) successful probes, p95 TTFT, and the verdict."""
    lines = [
        "# HELP lorafleet_canary_probes Canary probes in the last run, by alias and result.",
        "# TYPE lorafleet_canary_probes gauge",
    ]
    for alias, t in tallies.items():
        for result, n in (
            ("hit", t.hits),
            ("miss", t.misses),
            ("unchecked", t.unchecked),
            ("error", t.errors),
        ):
            lines.append(
                f'lorafleet_canary_probes{{alias="{_label(alias)}",result="{result}"}} {n}'
            )
    lines += [
        "# HELP lorafleet_canary_answers Successful probes by alias and answering adapter id.",
        "# TYPE lorafleet_canary_answers gauge",
    ]
    for alias, t in tallies.items():
        for adapter_id, n in t.answered.items():
            lines.append(
                f'lorafleet_canary_answers{{alias="{_label(alias)}",'
                f'adapter_id="{_label(adapter_id)}"}} {n}'
            )
    lines += [
        "# HELP lorafleet_canary_switches Changes of answering adapter id during the last run.",
        "# TYPE lorafleet_canary_switches gauge",
        *(
            f'lorafleet_canary_switches{{alias="{_label(a)}"}} {t.switches}'
            for a, t in tallies.items()
        ),
        "# HELP lorafleet_canary_ttft_p95_seconds p95 time to first token of the last run.",
        "# TYPE lorafleet_canary_ttft_p95_seconds gauge",
    ]
    for alias, t in tallies.items():
        p95 = percentile(t.ttfts, 0.95)
        if p95 is not None:
            lines.append(f'lorafleet_canary_ttft_p95_seconds{{alias="{_label(alias)}"}} {p95:.6f}')
    lines += [
        "# HELP lorafleet_canary_ok 1 when the last run passed (markers right, errors in bounds).",
        "# TYPE lorafleet_canary_ok gauge",
        f"lorafleet_canary_ok {1 if exit_code == 0 else 0}",
        "# HELP lorafleet_canary_last_run_timestamp_seconds When the last run finished.",
        "# TYPE lorafleet_canary_last_run_timestamp_seconds gauge",
        f"lorafleet_canary_last_run_timestamp_seconds {now:.3f}",
    ]
    return "\n".join(lines) + "\n"
