"""The stall probe's fits (pure): stops per request, per adapter load and per second of
engine busy time, from the pings and streams `benchmarks/calibration_stall_probe.py` records.

A ping is one GET of a hop's health endpoint: (hop, sent at, seconds). A stream is one
response's reads: (arrival time, SSE events in the read).
"""

from __future__ import annotations

import itertools
import statistics
from typing import Any

Chunks = list[tuple[float, int]]  # one stream: (arrival time, SSE events in the read)


def stops(
    pings: list[tuple[str, float, float]],
    client_gc: list[tuple[float, int, float]],
    threshold_s: float,
) -> dict[str, list[tuple[float, float]]]:
    """Per hop, the stops seen: [(start, seconds)]. A ping slower than the hop's median by
    `threshold_s` was held by a stop, unless the client itself was collecting then."""
    gc_windows = [(t, t + d) for t, _, d in client_gc if d >= threshold_s / 2]
    out: dict[str, list[tuple[float, float]]] = {}
    for hop in sorted({p[0] for p in pings}):
        mine = sorted((t, d) for h, t, d in pings if h == hop)
        base = statistics.median(d for _, d in mine)
        found: list[tuple[float, float]] = []
        for t, d in mine:
            extra = d - base
            if extra < threshold_s or any(a <= t + d and t <= b for a, b in gc_windows):
                continue
            if found and t <= found[-1][0] + found[-1][1]:  # the same stop, seen again
                start, length = found[-1]
                found[-1] = (start, max(length, t + extra - start))
            else:
                found.append((t, extra))
        out[hop] = found
    out["client"] = [(t, d) for t, _, d in client_gc if d >= threshold_s]
    return out


def held_gaps(streams: list[Chunks], threshold_s: float) -> list[tuple[float, float]]:
    """Stops that held a stream: [(start, seconds)]. A gap of `threshold_s` beyond the stream's
    median gap, after which two or more events arrive within 3 ms, was a hold (the engine
    kept generating while the bytes waited); a gap followed by one event is the engine's own
    (a long step), not a stop of the path."""
    out = []
    for chunks in streams:
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(chunks)]
        if len(gaps) < 3:
            continue
        base = statistics.median(gaps)
        for i, gap in enumerate(gaps, start=1):
            if gap - base < threshold_s:
                continue
            burst = sum(n for t, n in chunks[i:] if t - chunks[i][0] < 0.003)
            if burst >= 2:
                out.append((chunks[i - 1][0], gap - base))
    return sorted(out)


def sentinel_fit(
    streams: list[Chunks], threshold_s: float, duration_s: float, requests: int
) -> dict[str, float]:
    """What `stop_fit` gives, from a sentinel stream that was open all along: every stop of
    the path while it streamed is seen (no sampling), so stops per second = holds / time
    streaming; host_pause_per_request scales that to the run's requests."""
    holds = held_gaps(streams, threshold_s)
    streaming = sum(c[-1][0] - c[0][0] for c in streams if len(c) > 1)
    per_s = len(holds) / streaming if streaming > 0 else 0.0
    return {
        "holds": len(holds),
        "streaming_s": streaming,
        "host_pause_per_request": per_s * duration_s / requests if requests else 0.0,
        "host_pause_s": statistics.mean(d for _, d in holds) if holds else 0.0,
    }


def stop_fit(
    pings: list[tuple[str, float, float]],
    client_gc: list[tuple[float, int, float]],
    threshold_s: float,
    duration_s: float,
    requests: int,
) -> dict[str, Any]:
    """Stops per request and their length, from the share of pings held (not by counting
    stops: a ping every 90 ms per hop misses a 40 ms stop more often than not).

    Pings go out on a clock that knows nothing of the stops, so the share of a hop's pings
    held (slower than its median by `threshold_s`) is the share of time it is stopped, f, and
    a held ping waits on average half a stop: length D = 2 x its mean extra wait, and stops
    per second = f / D. The client's own collections are timed exactly (gc.callbacks); pings
    during one are left out (the client held them, not the hop).
    """
    gc_windows = [(t, t + d) for t, _, d in client_gc if d >= threshold_s / 2]
    hops: dict[str, dict[str, float]] = {}
    rate = 0.0  # stops per second, all hops
    stopped = 0.0  # seconds stopped per second, all hops
    for hop in sorted({p[0] for p in pings}):
        mine = [
            (t, d)
            for h, t, d in pings
            if h == hop and not any(a <= t + d and t <= b for a, b in gc_windows)
        ]
        base = statistics.median(d for _, d in mine)
        held = [d - base for _, d in mine if d - base >= threshold_s]
        share = len(held) / len(mine)
        # The last `threshold_s` of every stop holds no ping long enough to count: a counted
        # ping waits (D + threshold) / 2 on average, and only D - threshold of D is seen.
        length = max(threshold_s, 2 * statistics.mean(held) - threshold_s) if held else 0.0
        if length > threshold_s:
            share *= length / (length - threshold_s)
        per_s = share / length if length else 0.0
        hops[hop] = {"pings": len(mine), "held": len(held), "share": share, "stop_s": length}
        rate += per_s
        stopped += share
    own = [d for _, _, d in client_gc if d >= threshold_s]
    hops["client"] = {"stops": len(own), "stop_s": statistics.mean(own) if own else 0.0}
    rate += len(own) / duration_s
    stopped += sum(own) / duration_s
    return {
        "hops": hops,
        "host_pause_per_request": rate * duration_s / requests if requests else 0.0,
        "host_pause_s": stopped / rate if rate else 0.0,
    }


def load_fit(quiet: dict[str, Any], loaded: dict[str, Any]) -> dict[str, float]:
    """Stops that come with adapter loads, from two runs of the probe: `quiet` over aliases
    that stay registered (no load), `loaded` cycling over more aliases than vLLM's RAM slots.

    The loaded run's stops beyond what the quiet run's per-request rate gives for as many
    requests are the loads': host_pause_per_load = those stops / the requests that loaded
    (disk or remote tier), host_pause_load_s = their stopped time / their number. The
    stops are the gateway sentinel's holds where both runs have one (what the model does:
    streams held), else the pings'.
    """
    key = "sentinel" if "sentinel" in quiet and "sentinel" in loaded else "fit"
    q, ld = quiet[key], loaded[key]
    n = loaded["requests"]
    stops = ld["host_pause_per_request"] * n
    base = q["host_pause_per_request"] * n
    extra = max(0.0, stops - base)
    stopped = max(0.0, stops * ld["host_pause_s"] - base * q["host_pause_s"])
    if stopped <= 0.0:  # more stops, but no more time stopped: nothing the loads added
        extra = 0.0
    return {
        "host_pause_per_load": extra / loaded["loads"] if loaded["loads"] else 0.0,
        "host_pause_load_s": stopped / extra if extra else 0.0,
    }


def _per_s(run: dict[str, Any]) -> tuple[float, float]:
    """(stops per second, seconds stopped per second) of a probe run, from its pings' fit."""
    fit = run["fit"]
    per_s = fit["host_pause_per_request"] * run["requests"] / run["duration_s"]
    return per_s, per_s * fit["host_pause_s"]


def busy_fit(plain: dict[str, Any], busy: dict[str, Any]) -> dict[str, float]:
    """Stops that come with the engine's busy time, from two runs of the probe over the same
    aliases: `plain` (the paced load alone: the engine steps now and then) and `busy` (the
    same load beside long requests that keep the engine stepping all along: `busy_s`, or a
    sentinel stream, `streaming_s`, in runs made before the keep-busy requests).

    The busy run's stops per second beyond the plain run's are the busy engine's; divided by
    the seconds the engine was kept stepping per second of the run they are stops per second
    of engine busy time, `host_pause_per_busy_s`;
    their mean length `host_pause_busy_s` is the extra stopped time over the extra stops
    (none when the busy engine adds no stopped time).
    """
    p_rate, p_stopped = _per_s(plain)
    b_rate, b_stopped = _per_s(busy)
    extra, stopped = b_rate - p_rate, b_stopped - p_stopped
    kept = busy.get("busy", {}).get("busy_s") or busy.get("sentinel", {}).get("streaming_s", 0.0)
    streaming = min(kept, busy["duration_s"]) / busy["duration_s"]
    if extra <= 0 or stopped <= 0 or streaming <= 0:
        return {"host_pause_per_busy_s": 0.0, "host_pause_busy_s": 0.0}
    return {"host_pause_per_busy_s": extra / streaming, "host_pause_busy_s": stopped / extra}
