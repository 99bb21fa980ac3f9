"""The host CPU a replica's request path runs on, as a processor-sharing server (pure).

Outside vLLM's engine a request costs CPU in the gateway, the agent, vLLM's API server process
(detokenizing, SSE framing) and, on the calibration machine, the load client: before its first
token reaches the client, for every token it streams after that, and after its last token.
When those processes share few cores, the work of busy streams slows other requests' first
tokens. `HostCpu` runs every piece of that work as a job: n jobs on `cores` cores beside
`competing` always-runnable threads (the path's idle work, and vLLM's engine threads while the
engine steps, when they may run on the same cores) each progress at min(1, cores / (n +
competing)) CPU-seconds per second (processor sharing, what the kernel's fair scheduler
approximates for runnable threads), and a job's callback runs when its work is done. Off (no
`HostCpu` at all) when `ReplicaParams.host_cores` is 0: the design's GPU nodes have many
cores beside the engine, so the path is then the constant `path_s`.

A process on the path can also stop for a while (a full garbage collection of a large heap,
a blocking call on its event loop): `pause` serves nothing until it ends, so every stream
through the host waits, while the engine keeps generating. Where the engine's threads share the
path's cores, the path is also stopped by them (descheduled for far longer than processor
sharing gives): `engine_stepping` keeps a clock of the engine's busy time, and every
`busy_stop_every_s` seconds of it the host stops for `busy_stop_s` (measured stops per second
of engine busy time; `busy_stop_every_s` 0 = never).

Deterministic: jobs finish in order of remaining work, ties in submission order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Schedule = Callable[[float, Callable[[float, Any], None], Any], None]
Done = Callable[[float, Any], None]

_EPS = 1e-12  # CPU-seconds: a job with less left than this has finished (float rounding)


class HostCpu:
    def __init__(
        self,
        cores: float,
        schedule: Schedule,
        competing: float = 0.0,
        engine_threads: float = 0.0,
        busy_stop_every_s: float = 0.0,
        busy_stop_s: float = 0.0,
    ) -> None:
        if cores <= 0:
            raise ValueError("a host CPU needs cores > 0 (0 turns the model off)")
        self.cores = cores
        self.competing = competing
        self.background = competing  # competing threads while the engine idles
        self.engine_threads = engine_threads  # more of them while it steps
        self.busy_stop_every_s = busy_stop_every_s
        self.busy_stop_s = busy_stop_s
        self._busy_since: float | None = None  # the engine steps since then (None: idle)
        self._busy_left = busy_stop_every_s  # engine busy seconds until the next stop
        self._busy_wake = 0  # id of the one busy-stop event that counts
        self.busy_stops = 0  # stops the engine's busy time caused so far
        self._schedule = schedule
        self._jobs: dict[int, list[Any]] = {}  # id -> [work left, callback, argument]
        self._next_id = 0
        self._last = 0.0  # time the jobs' work left was last brought up to date
        self._paused_until = 0.0
        self._wake = 0  # id of the one completion event that counts; others are stale
        self.busy_s = 0.0  # CPU-seconds served so far (utilisation = busy_s / (cores * t))

    def __len__(self) -> int:
        return len(self._jobs)

    def rate(self) -> float:
        """CPU-seconds per second each job gets now."""
        n = len(self._jobs)
        return min(1.0, self.cores / (n + self.competing)) if n else 0.0

    def set_competing(self, now: float, competing: float) -> None:
        """From `now` on, `competing` threads also want the cores (engine busy or idle)."""
        if competing == self.competing:
            return
        self._advance(now)
        self.competing = competing
        if self._jobs:
            self._reschedule(now)

    def engine_stepping(self, now: float, busy: bool) -> None:
        """The engine steps (or idles) from `now` on: its threads compete for the cores
        meanwhile, and its busy time runs the clock of the stops it causes."""
        self.set_competing(now, self.background + (self.engine_threads if busy else 0.0))
        if self.busy_stop_every_s <= 0 or busy == (self._busy_since is not None):
            return
        self._busy_wake += 1
        if busy:
            self._busy_since = now
            self._schedule(now + max(0.0, self._busy_left), self._busy_stop, self._busy_wake)
        else:
            assert self._busy_since is not None
            self._busy_left -= now - self._busy_since
            self._busy_since = None

    def _busy_stop(self, now: float, wake: int) -> None:
        if wake != self._busy_wake:
            return
        self.busy_stops += 1
        self.pause(now, self.busy_stop_s)
        self._busy_since, self._busy_left = now, self.busy_stop_every_s
        self._busy_wake += 1
        self._schedule(now + self._busy_left, self._busy_stop, self._busy_wake)

    def submit(
        self, now: float, work_s: float, done: Done | None = None, arg: Any = None, count: int = 1
    ) -> None:
        """Run `count` jobs of `work_s` CPU-seconds each; `done(t, arg)` as each one finishes
        (at once if there is no work, unless the host is stopped: then when the stop ends)."""
        if count <= 0:
            return
        if work_s <= 0:
            if now >= self._paused_until:
                if done is not None:
                    for _ in range(count):
                        done(now, arg)
                return
            work_s = _EPS  # nothing passes a stopped process: it waits for the stop's end
        self._advance(now)
        for _ in range(count):
            self._jobs[self._next_id] = [work_s, done, arg]
            self._next_id += 1
        self._reschedule(now)

    def pause(self, now: float, duration_s: float) -> None:
        """Serve nothing from `now` for `duration_s` (a stop that overlaps one extends it)."""
        if duration_s <= 0:
            return
        self._advance(now)
        self._paused_until = max(self._paused_until, now) + duration_s
        if self._jobs:
            self._reschedule(now)

    def _advance(self, now: float) -> None:
        dt = now - max(self._last, self._paused_until)
        self._last = now
        if dt <= 0 or not self._jobs:
            return
        served = self.rate() * dt
        for job in self._jobs.values():
            job[0] -= served
        self.busy_s += served * len(self._jobs)

    def _reschedule(self, now: float) -> None:
        self._wake += 1
        if not self._jobs:
            return
        least = min(job[0] for job in self._jobs.values())
        start = max(now, self._paused_until)
        self._schedule(start + max(0.0, least) / self.rate(), self._complete, self._wake)

    def _complete(self, now: float, wake: int) -> None:
        if wake != self._wake:
            return
        self._advance(now)
        least = min(job[0] for job in self._jobs.values())
        done = [jid for jid, job in self._jobs.items() if job[0] <= max(least, _EPS)]
        finished = [self._jobs.pop(jid) for jid in done]
        self._reschedule(now)
        for _, fn, arg in finished:
            if fn is not None:
                fn(now, arg)
