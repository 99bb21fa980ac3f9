"""The soak's memory figures: RSS of each process over time, and whether it grows.

Sampling (`RssSampler`) is the only I/O here: psutil's `memory_info().rss` of each named root
process and of every descendant (vLLM's API server spawns its engine core as a child process,
which holds the weights and the KV cache). Descendants are labelled `<root>><name>` by process
name, so a restarted child keeps its label and the pid change shows as a restart.

The verdict (`summarize_rss`) is pure: a least-squares line through the samples after the
warm-up (start-up allocations, caches filling and the first adapter loads are not a leak), in
MiB/min, and the rise that line implies over the measured window. A process is flagged as
growing when that rise exceeds both `min_rise_mib` and `rel_rise` of its median RSS (an
allocator breathing by a few MiB around a 3 GiB engine is noise, a steady climb of tens of MiB
in a 150 MiB gateway is not), and the later half of the window, extrapolated over the whole
window, does too: a leak climbs all along, a warm-up that outlasts `warmup_s` flattens out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import psutil

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class RssSample:
    t: float  # seconds since the run's start
    label: str
    pid: int
    rss_mib: float


@dataclass(frozen=True, slots=True)
class RssSummary:
    label: str
    samples: int
    first_mib: float
    last_mib: float
    max_mib: float
    median_mib: float
    slope_mib_per_min: float  # fitted over the samples after the warm-up
    late_slope_mib_per_min: float  # fitted over the later half of those samples
    rise_mib: float  # slope x the fitted window: the growth the line implies
    window_s: float
    pids: list[int]  # more than one: the process was restarted during the run
    growing: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def median_of(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize_rss(
    samples: Iterable[RssSample],
    *,
    warmup_s: float,
    min_rise_mib: float = 16.0,
    rel_rise: float = 0.05,
) -> list[RssSummary]:
    """One summary per label, in the order labels first appear."""
    by_label: dict[str, list[RssSample]] = {}
    for s in samples:
        by_label.setdefault(s.label, []).append(s)
    out = []
    for label, series in by_label.items():
        series.sort(key=lambda s: s.t)
        measured = [s for s in series if s.t >= warmup_s] or series
        xs = [s.t / 60.0 for s in measured]
        ys = [s.rss_mib for s in measured]
        slope = fit_slope(xs, ys)
        window_s = measured[-1].t - measured[0].t
        rise = slope * window_s / 60.0
        half = measured[0].t + window_s / 2
        late = [s for s in measured if s.t >= half]
        late_slope = fit_slope([s.t / 60.0 for s in late], [s.rss_mib for s in late])
        median = median_of([s.rss_mib for s in series])
        limit = max(min_rise_mib, rel_rise * median)
        pids = list(dict.fromkeys(s.pid for s in series))
        out.append(
            RssSummary(
                label=label,
                samples=len(series),
                first_mib=series[0].rss_mib,
                last_mib=series[-1].rss_mib,
                max_mib=max(s.rss_mib for s in series),
                median_mib=median,
                slope_mib_per_min=slope,
                late_slope_mib_per_min=late_slope,
                rise_mib=rise,
                window_s=window_s,
                pids=pids,
                # A leak climbs all along; a warm-up that runs past `warmup_s` (the engine's KV
                # cache pages touched for the first time) flattens out in the later half.
                growing=rise > limit and late_slope * window_s / 60.0 > limit,
            )
        )
    return out


def _tree(label: str, pid: int, others: set[int]) -> list[tuple[str, psutil.Process]]:
    """The root and its descendants, labelled; an absent root yields nothing.

    A descendant that is (or descends from) another root belongs to that root: `lorafleet up`
    is the parent of every process it supervises, each of them sampled under its own name.
    """
    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except psutil.Error:
        return []
    out = [(label, root)]
    seen: dict[str, int] = {}
    for child in sorted(children, key=lambda c: c.pid):  # stable labels for same-name children
        try:
            between = [child.pid]  # the child and its ancestors below the root
            for parent in child.parents():
                if parent.pid == pid:
                    break
                between.append(parent.pid)
            name = child.name()
        except psutil.Error:
            continue
        if others.intersection(between):
            continue
        n = seen.get(name, 0)
        seen[name] = n + 1
        out.append((f"{label}>{name}" + (f"#{n + 1}" if n else ""), child))
    return out


@dataclass(frozen=True, slots=True)
class Mapping:
    path: str  # "[anon]" for an anonymous mapping (a malloc arena, a tensor, the KV cache)
    size_mib: float
    rss_mib: float


def mapping_growth(
    start: dict[str, Mapping], end: dict[str, Mapping], top: int = 3
) -> list[dict[str, Any]]:
    """The mappings (by start address) whose resident size grew most between two snapshots.

    Tells a leak (many small mappings, or the heap, growing) from a big preallocated buffer
    being touched for the first time (one mapping of fixed size filling up towards its size).
    """
    rows: list[tuple[float, dict[str, Any]]] = []
    for addr, m in end.items():
        before = start.get(addr)
        grown = m.rss_mib - (before.rss_mib if before else 0.0)
        row = {
            "addr": addr,
            "path": m.path,
            "size_mib": round(m.size_mib, 1),
            "rss_before_mib": round(before.rss_mib, 1) if before else None,
            "rss_after_mib": round(m.rss_mib, 1),
            "grown_mib": round(grown, 1),
        }
        rows.append((grown, row))
    rows.sort(key=lambda r: -r[0])
    return [row for _, row in rows[:top]]


def _mappings(proc: psutil.Process) -> dict[str, Mapping]:
    out = {}
    for m in proc.memory_maps(grouped=False):
        # Keyed by the start address: the heap grows at its end, so its range changes.
        out[m.addr.split("-")[0]] = Mapping(m.path or "[anon]", m.size / MIB, m.rss / MIB)
    return out


class RssSampler:
    """Samples every `interval_s` until stopped; `roots()` is re-read each time (restarts)."""

    def __init__(
        self, roots: Callable[[], dict[str, int]], interval_s: float, t0: float | None = None
    ) -> None:
        self.roots = roots
        self.interval_s = interval_s
        self.t0 = time.perf_counter() if t0 is None else t0
        self.samples: list[RssSample] = []

    def sample_once(self) -> None:
        now = time.perf_counter() - self.t0
        roots = self.roots()
        pids = set(roots.values())
        for label, pid in roots.items():
            for name, proc in _tree(label, pid, pids - {pid}):
                try:
                    rss = proc.memory_info().rss
                except psutil.Error:
                    continue  # exited between the listing and the read
                self.samples.append(RssSample(now, name, proc.pid, rss / MIB))

    def mappings(self, min_rss_mib: float = 1024.0) -> dict[str, dict[str, Mapping]]:
        """Per-mapping resident sizes of the big processes (reading smaps costs ~ms per GiB)."""
        roots = self.roots()
        pids = set(roots.values())
        out = {}
        for label, pid in roots.items():
            for name, proc in _tree(label, pid, pids - {pid}):
                try:
                    if proc.memory_info().rss / MIB >= min_rss_mib:
                        out[name] = _mappings(proc)
                except psutil.Error:
                    continue
        return out

    async def run(self, stop: asyncio.Event) -> None:
        while True:
            # psutil reads /proc synchronously; a few processes take well under a millisecond.
            self.sample_once()
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except TimeoutError:
                continue
            self.sample_once()  # the last point, at the end of the load
            return
