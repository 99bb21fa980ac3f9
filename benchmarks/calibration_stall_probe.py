"""The stall probe of the calibration: how often, and for how long, a hop of the request path
stops serving (I/O; the model is `lorafleet_sim.host.HostCpu.pause`).

The quiet calibration's slowest requests received all their tokens at once (total time = TTFT
+ ~1 ms) and several of them at the same instant: the engine had generated the tokens, and
some process on the way back held them. A processor-sharing CPU cannot do that at 15% load;
a process that stops (a full garbage collection of a heap holding torch and transformers, a
blocking call on an event loop) can. This probe measures such stops directly, under a paced
load of the probe's own (never the replay's):

- a heartbeat thread GETs each hop's cheapest endpoint in turn (the gateway's and the agent's
  `/healthz`, vLLM's `/health`), one every `interval_s`; a ping that takes `threshold_s`
  longer than that hop's median was held by a stop of that process. The share of pings held
  is the share of time stopped, and a held ping waits half a stop on average (`stop_fit`);
  the stops themselves (overlapping slow pings as one) are listed for diagnosis;
- `gc.callbacks` time the client's own collections (its heartbeat thread stops with it: a
  client stop shows on every hop at once and is counted once, from the callbacks).

Result: stops per request served and their mean length, per hop and in all (`fit`).

Run twice: over 3 aliases, which stay registered (no load: the stops of the path itself), and
over all 12, more than vLLM's 4 RAM slots, so nearly every request registers its adapter from
the disk tier; the second run's stops beyond the first's rate are the loads' (`load_fit`:
`host_pause_per_load`, `host_pause_load_s`).

    python benchmarks/calibration_stall_probe.py   # alone, prints JSON
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.calibration_probes import TOKENS_PER_WORD
from benchmarks.calibration_stall_fit import (
    Chunks,
    held_gaps,
    load_fit,
    sentinel_fit,
    stop_fit,
    stops,
)
from lorafleet_loadtest.driver import Target
from lorafleet_loadtest.plan import prompt_text
from lorafleet_loadtest.probe.client import make_client, stream_chat
from lorafleet_loadtest.probe.results import RequestResult


class GcRecorder:
    """The client's garbage collections: [(start s, generation, seconds)]."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, float]] = []
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._start = now
        else:
            self.events.append((self._start, int(info.get("generation", -1)), now - self._start))

    def __enter__(self) -> GcRecorder:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


class Heartbeat(threading.Thread):
    """Pings each endpoint in turn every `interval_s`: [(hop, sent at, seconds)]."""

    def __init__(self, endpoints: dict[str, str], interval_s: float) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.interval_s = interval_s
        self.pings: list[tuple[str, float, float]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=10.0) as client:
            hops = list(self.endpoints.items())
            i = 0
            while not self._stop_event.is_set():
                hop, url = hops[i % len(hops)]
                i += 1
                sent = time.perf_counter()
                try:
                    client.get(url)
                except httpx.HTTPError:
                    continue
                self.pings.append((hop, sent, time.perf_counter() - sent))
                self._stop_event.wait(max(0.0, self.interval_s - (time.perf_counter() - sent)))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=15)


async def _sentinel(url: str, body: dict[str, Any], headers: dict[str, str],
                    stop: asyncio.Event, out: list[Chunks]) -> None:  # fmt: skip
    """Long streams one after the other until `stop`: every read's time and its events."""
    async with httpx.AsyncClient(timeout=120.0) as http:
        while not stop.is_set():
            chunks: Chunks = []
            try:
                async with http.stream("POST", url, json=body, headers=headers) as r:
                    async for chunk in r.aiter_raw():
                        chunks.append((time.perf_counter(), chunk.count(b"data:")))
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                out.append(chunks)
            else:  # refused or cut: not a stream to read gaps from; try again shortly
                await asyncio.sleep(0.1)


async def _keep_busy(url: str, body: dict[str, Any], headers: dict[str, str],
                     stop: asyncio.Event, out: list[tuple[float, float]]) -> None:  # fmt: skip
    """Long non-streamed completions one after the other until `stop`: the engine steps all
    along while the path carries one response per request (sent, answered at)."""
    async with httpx.AsyncClient(timeout=120.0) as http:
        while not stop.is_set():
            sent = time.perf_counter()
            try:
                ok = (await http.post(url, json=body, headers=headers)).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                out.append((sent, time.perf_counter()))
            else:
                await asyncio.sleep(0.1)


async def _paced_load(
    target: Target,
    rate: float,
    duration_s: float,
    max_tokens: int,
    aliases: int,
    sentinel: list[Chunks] | None = None,
    busy: list[tuple[float, float]] | None = None,
) -> list[RequestResult]:
    """One 8-token request every 1/rate s, cycling over the `aliases` hottest aliases, for
    `duration_s`. Within the RAM slots (3 of 4) nothing is loaded; over them (all 12) nearly
    every request registers its adapter with vLLM from the disk tier. With `sentinel`, a
    long stream of the hottest alias through the gateway is open all along (its reads go
    there): a stop of any hop holds it. With `busy`, the same request unstreamed, again and
    again: the engine never idles, and the path has little of its own to do for it."""
    client = make_client(target.base_url, target.api_key, 120.0)
    stop = asyncio.Event()
    watch = None
    body = {"model": target.aliases[0], "prompt": "once upon a time", "max_tokens": 120,
            "ignore_eos": True, "temperature": 0.0, "stream": True}  # fmt: skip
    auth = {"authorization": f"Bearer {target.api_key}"}
    url = target.base_url.rstrip("/") + "/completions"
    if sentinel is not None:
        watch = asyncio.create_task(_sentinel(url, body, auth, stop, sentinel))
    elif busy is not None:
        watch = asyncio.create_task(_keep_busy(url, {**body, "stream": False}, auth, stop, busy))
    t0 = time.perf_counter()
    tasks = []
    try:
        n = int(rate * duration_s)
        for i in range(n):
            await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            tasks.append(
                asyncio.create_task(
                    stream_chat(
                        client,
                        index=200_000 + i,
                        alias=target.aliases[i % aliases],
                        prompt=prompt_text(20, 200_000 + i, TOKENS_PER_WORD),
                        max_tokens=max_tokens,
                        marker=None,
                        scheduled_at=i / rate,
                        run_t0=t0,
                    )
                )
            )
        results = await asyncio.gather(*tasks)
    finally:
        stop.set()
        if watch is not None:
            await watch
        await client.close()
    return list(results)


def probe_stalls(
    target: Target,
    endpoints: dict[str, str],
    rate: float = 5.0,
    duration_s: float = 30.0,
    interval_s: float = 0.03,
    threshold_s: float = 0.010,
    max_tokens: int = 8,
    aliases: int = 3,
    sentinel: bool = False,
    busy: bool = False,
) -> dict[str, Any]:
    """`busy`: the engine kept stepping all along by unstreamed long requests beside the
    paced load (`busy_fit`: the stops that come with engine busy time)."""
    beat = Heartbeat(endpoints, interval_s)
    streams: list[Chunks] = []
    answered: list[tuple[float, float]] = []
    with GcRecorder() as rec:
        beat.start()
        t0 = time.perf_counter()
        watch = streams if sentinel else None
        keep = answered if busy else None
        results = asyncio.run(
            _paced_load(target, rate, duration_s, max_tokens, aliases, sentinel=watch, busy=keep)
        )
        wall = time.perf_counter() - t0
        beat.stop()
    served = sum(1 for r in results if r.ok)
    loads = sum(1 for r in results if r.ok and r.tier in ("disk", "remote"))
    found = stops(beat.pings, rec.events, 0.025)
    fit = stop_fit(beat.pings, rec.events, threshold_s, wall, served)
    return {
        "rate": rate,
        "aliases": aliases,
        "duration_s": wall,
        "requests": served,
        "loads": loads,  # requests that registered their adapter with vLLM (disk, remote)
        "interval_s": interval_s,
        "threshold_s": threshold_s,
        "pings": len(beat.pings),
        "ping_median_s": {
            hop: statistics.median(d for h, _, d in beat.pings if h == hop) for hop in endpoints
        },
        # diagnostics: stops seen (>= 25 ms), per hop, [start s, length s]
        "stops": {hop: [[round(t - t0, 4), d] for t, d in v] for hop, v in found.items()},
        "client_gc": [[round(t - t0, 4), g, d] for t, g, d in rec.events if d >= 0.001],
        "hops": fit.pop("hops"),
        # the gateway sentinel's holds, [start s, length s], and what they give as a fit
        **(
            {
                "held": [[round(t - t0, 4), d] for t, d in held_gaps(streams, threshold_s)],
                "sentinel": sentinel_fit(streams, threshold_s, wall, served),
            }
            if sentinel
            else {}
        ),
        # the keep-busy requests: how many, and the seconds they kept the engine stepping
        **(
            {"busy": {"requests": len(answered), "busy_s": sum(b - a for a, b in answered)}}
            if busy
            else {}
        ),
        # host_pause_per_request: stops of any hop per request served; host_pause_s: their
        # mean length (a stop of any hop holds every stream through it).
        "fit": fit,
    }


def fleet_endpoints(up: dict[str, Any]) -> dict[str, str]:
    """Each hop's cheapest GET from `lorafleet up`'s up.json."""
    replica = up["replicas"][0]
    return {
        "gateway": up["gateway"]["url"].rstrip("/") + "/healthz",
        "agent": replica["dataUrl"].rstrip("/") + "/healthz",
        "api_server": replica["vllmUrl"].rstrip("/") + "/health",
    }


def main() -> int:
    from e2e.standalone_fleet import FleetOptions, started_fleet

    with started_fleet(FleetOptions(replicas=1, gpu_slots=2, host_ram_slots=4, copies=3)) as f:
        up = json.loads((f.state_dir / "up.json").read_text())
        target = Target(f.base_url, f.api_key, {}, aliases=tuple(f.aliases))
        doc = probe_stalls(target, fleet_endpoints(up))
        loaded = probe_stalls(target, fleet_endpoints(up), aliases=len(f.aliases))
        doc = {"quiet": doc, "loaded": loaded, "fit": load_fit(doc, loaded)}
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
