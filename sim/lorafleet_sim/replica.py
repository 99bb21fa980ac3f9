"""One simulated replica: the agent's cache policy in front of a continuously batching vLLM.

The cache decisions are the agent's own object (`lorafleet_core.planning.cache_policy.CachePolicy`):
a request takes a reference on arrival, so its adapter is never evicted while it waits or runs;
an adapter not registered with vLLM is loaded once (later requests for it wait on that load)
from disk or from the object store, whose bandwidth concurrent fetches on this replica share;
registering needs an idle RAM slot, and when every registered adapter is in use the load waits
for a release. Other sequences keep decoding meanwhile.

Pre-warm is the agent's pass (`start_pass`; `lorafleet_sim.prewarm.AgentPass`): one
adapter at a time, the first RAM slots' worth registered, then the rest fetched to disk only;
its fetches share the object-store link with the requests' own. A request for an adapter the
pass is fetching waits for that fetch and counts as remote, as the agent reports it.

vLLM's continuous batching with chunked prefill is `VllmBatching`
(lorafleet_sim.batching), mixed in.

With `host_cores` > 0 the path's CPU work also runs on the replica's host CPU
(`lorafleet_sim.host.HostCpu`, processor sharing): `host_ttft_cpu_s` before the client's
first token (the way in before the request reaches the agent's cache, the first chunk's way
back after the engine's first token), `host_token_cpu_s` for every later token each stream
carries, `host_end_cpu_s` after its last, beside `host_engine_busy` threads of the engine's
while it steps; busy streams then delay other first tokens. Every 1 / `host_pause_per_request`
arrivals the host stops for `host_pause_s` (a process's garbage collection), and every
1 / `host_pause_per_load` registrations of an adapter with vLLM for `host_pause_load_s`, and
every 1 / `host_pause_per_busy_s` seconds of engine busy time for `host_pause_busy_s`.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lorafleet_core.planning.cache_policy import CachePolicy, LruBytes, SlotTracker
from lorafleet_core.planning.prewarm import PrewarmPass
from lorafleet_core.wire.tiers import Tier
from lorafleet_sim.batching import VllmBatching
from lorafleet_sim.host import HostCpu
from lorafleet_sim.params import ReplicaParams
from lorafleet_sim.prewarm import AgentPass

if TYPE_CHECKING:
    from lorafleet_sim.engine import Engine

TIER_CODE = {Tier.GPU: 0, Tier.RAM: 1, Tier.DISK: 2, Tier.REMOTE: 3}


class Replica(VllmBatching):
    # Decode-only stretches as one event (the hot path's main saving); the step-by-step loop
    # gives the same answers and is kept for the test that checks exactly that.
    batch_decode_steps = True

    def __init__(self, rid: str, index: int, p: ReplicaParams, eng: Engine) -> None:
        self.id = rid
        self.index = index
        self.p = p
        self.eng = eng
        self.alive = False  # serving (base model up); False while starting or after a failure
        self.epoch = 0  # bumped on failure: events of an earlier life are ignored
        self.gpu_seconds = 0.0  # GPU time paid so far (starting, serving), for cost
        self.alive_since = 0.0
        self.draining = False  # scaled down: no new requests, stops when the last one ends
        self.started_at = 0.0  # pod created (GPU paid from here)
        # Until then (or until its first pre-warm pass ends) the gateway leaves it out, as the
        # agent's `warming` state makes it do; 0 for the fleet that starts warm.
        self.warm_gate_until = 0.0
        self.stopped_at: float | None = None
        self.evictions = 0  # the agent's evictions (unregister from RAM, delete from disk)
        self.gpu_swaps = 0  # vLLM GPU-slot replacements (LRU) the agent's tracker replays
        self.loads = 0
        self.tokens_served: Counter[str] = Counter()  # adapter -> output tokens since last read
        self.busy_seq_s = 0.0  # integral of running sequences over time
        self.merged: str | None = None  # a merged pool's replica: the one adapter it serves
        self.host: HostCpu | None = None
        self._pause_credit = 0.0
        self._load_pause_credit = 0.0
        if p.host_cores > 0:
            every = 1.0 / p.host_pause_per_busy_s if p.host_pause_per_busy_s > 0 else 0.0
            self.host = HostCpu(p.host_cores, eng.schedule, p.host_background,
                                p.host_engine_busy, every, p.host_pause_busy_s)  # fmt: skip
            # Every step's streamed tokens cost host CPU: step by step (same answers).
            self.batch_decode_steps = False
        self._reset()

    def _reset(self) -> None:
        p = self.p
        self.cache = CachePolicy(SlotTracker(p.gpu_slots, p.ram_slots), LruBytes(p.disk_bytes))
        self.waiting: deque[int] = deque()  # requests ready for vLLM, no sequence free yet
        self.prefill: deque[list[int]] = deque()  # [request, prompt tokens left], FIFO
        self.decoding: list[tuple[int, int]] = []  # heap of (last step, request)
        self.done_prefill: list[int] = []  # requests whose prompt ends with the current step
        self.running = 0
        self.active: Counter[str] = Counter()  # running sequences per adapter (--max-loras cap)
        self.step = 0
        self.stepping = False
        self.wake = 0  # id of the one step event that counts; others are stale
        # A decode-only stretch scheduled as one event (run_steps > 0): see _next_step.
        self.run_start = 0.0
        self.run_steps = 0
        self.run_step_s = p.decode_s
        self.step_end = 0.0  # when the step in progress ends (vLLM's next scheduling point)
        self.tokens_in_flight = 0  # prompt + output of admitted, unfinished requests
        self.queue_depth = 0  # admitted, not yet streaming (agent's definition)
        self.inflight: set[int] = set()
        self.pending: dict[str, list[int]] = {}  # adapter being loaded -> requests waiting
        self.pending_tier: dict[str, int] = {}
        self.ram_waiters: deque[str] = deque()  # loaded to disk, waiting for an idle RAM slot
        self.remote_active = 0
        self.warm = AgentPass(self)  # the agent's pre-warm passes (a fresh agent: none yet)

    # ------------------------------------------------------------------ lifecycle

    def start_serving(self, now: float) -> None:
        self.alive = True
        self.alive_since = now

    def fail(self, now: float) -> list[int]:
        """The pod dies: every request on it is lost; caches go with it."""
        lost = sorted(self.inflight)
        self.alive = False
        self.epoch += 1
        wake = self.wake
        self._reset()
        self.wake = wake + 1  # the old life's step events are stale
        return lost

    def stop(self) -> None:
        self.alive = False
        self.epoch += 1
        self.wake += 1

    # ------------------------------------------------------------------ requests

    def arrive(self, req: int, now: float) -> None:
        eng = self.eng
        tokens = eng.prompt[req] + eng.output[req]
        self.tokens_in_flight += tokens
        self.queue_depth += 1
        self.inflight.add(req)
        host = self.host
        if host is not None:  # the hops' work before vLLM sees the request (see _path_cpu)
            # Stops come with allocation, so with requests: one every 1/rate arrivals.
            self._pause_credit += self.p.host_pause_per_request
            if self._pause_credit >= 1.0:
                self._pause_credit -= 1.0
                host.pause(now, self.p.host_pause_s)
            host.submit(now, self._path_cpu()[0], self._reached_agent, (self.epoch, req))
            return
        self._admit(req, now)

    def _path_cpu(self) -> tuple[float, float]:
        """host_ttft_cpu_s split at the engine: the first chunk's way back costs what any
        later token's does (host_token_cpu_s); the rest is the request's way in."""
        p = self.p
        back = min(p.host_token_cpu_s, p.host_ttft_cpu_s)
        return p.host_ttft_cpu_s - back, back

    def _reached_agent(self, now: float, arg: tuple[int, int]) -> None:
        if arg[0] == self.epoch:
            self._admit(arg[1], now)

    def _admit(self, req: int, now: float) -> None:
        eng = self.eng
        eng.agent_in[req] = now
        name = eng.names[eng.adapter_of[req]]
        if self.merged is not None:  # the weights are the adapter: nothing to load
            eng.tier[req] = 0
            self._enqueue(req, now)
            return
        cache = self.cache
        cache.acquire(name)
        waiting = self.pending.get(name)
        if waiting is not None:
            waiting.append(req)
            eng.tier[req] = self.pending_tier[name]
            return
        tier = cache.tier(name)
        if tier is Tier.GPU:
            eng.tier[req] = 0
            self._enqueue(req, now)
        elif tier is Tier.RAM:
            eng.tier[req] = 1
            eng.schedule(now + self.p.ram_s, self._ram_ready, (self.epoch, req))
        else:
            eng.tier[req] = TIER_CODE[tier]
            self.start_load(name, tier, now, [req])

    def _ram_ready(self, now: float, arg: tuple[int, int]) -> None:
        if arg[0] == self.epoch:
            self._enqueue(arg[1], now)

    def _enqueue(self, req: int, now: float) -> None:
        eng = self.eng
        eng.engine_in[req] = now
        self.waiting.append(req)
        if not self.stepping:
            eng.boundary[req] = now
            self._next_step(now)
            return
        if self.run_steps:
            self._interrupt_run(now)
        eng.boundary[req] = self.step_end

    # ------------------------------------------------------------------ loading

    def start_pass(self, plan: PrewarmPass[str]) -> None:
        """The agent read a changed owned-adapters annotation: a pass over it."""
        self.warm.start(plan, self.eng.now)

    def prewarm(self, names: Sequence[str]) -> None:
        """Extra adapters to register, after what the pass has queued (an experiment's)."""
        self.warm.add(names, self.eng.now)

    def start_load(self, name: str, tier: Tier, now: float, reqs: list[int]) -> None:
        self.pending[name] = reqs
        self.pending_tier[name] = TIER_CODE[tier]
        self.cache.loading.add(name)
        self.loads += 1
        if tier is Tier.REMOTE:
            self.remote_active += 1
            # Processor sharing, approximated at the start: this fetch gets 1/n of the link.
            duration = self.p.remote_s * self.remote_active
            self.eng.schedule(now + duration, self._fetched, (self.epoch, name))
        else:
            self.eng.schedule(now + self.p.disk_s, self._loaded, (self.epoch, name))

    def _fetched(self, now: float, arg: tuple[int, str]) -> None:
        if arg[0] != self.epoch:
            return
        name = arg[1]
        self.remote_active -= 1
        cache = self.cache
        victims = cache.disk_victims(self.p.adapter_bytes)
        if victims is not None:
            for victim in victims:
                cache.disk.remove(victim)
                self.evictions += 1
            cache.disk.put(name, self.p.adapter_bytes)
        if name in self.warm.disk_only:
            self._pulled(name, now)
            return
        self._loaded(now, arg)

    def _pulled(self, name: str, now: float) -> None:
        """The pass's fetch to disk ended: the pass goes on; requests that arrived during it
        then load the adapter from disk (the agent's ensure_on_disk, then ensure_registered)."""
        self.warm.disk_only.discard(name)
        if self.pending[name]:
            self.pending_tier[name] = TIER_CODE[Tier.DISK]  # what later arrivals wait on
            self.eng.schedule(now + self.p.disk_s, self._loaded, (self.epoch, name))
        else:
            self.cache.loading.discard(name)
            self.pending_tier.pop(name, None)
            del self.pending[name]
        if name == self.warm.current:
            self.warm.advance(now)

    def _loaded(self, now: float, arg: tuple[int, str]) -> None:
        if arg[0] != self.epoch:
            return
        name = arg[1]
        if not self._register(name):
            self.ram_waiters.append(name)
            return
        self._after_register(name, now)

    def _register(self, name: str) -> bool:
        cache = self.cache
        while cache.needs_ram_room():
            victim = cache.ram_victim(name)
            if victim is None:
                return False  # every registered adapter has running requests: wait
            cache.slots.unregister(victim)
            self.evictions += 1
        cache.slots.register(name)
        return True

    def _after_register(self, name: str, now: float) -> None:
        host = self.host
        if host is not None and self.p.host_pause_per_load > 0:
            # vLLM's registration stops the path (measured: load_fit): every 1/rate loads.
            self._load_pause_credit += self.p.host_pause_per_load
            if self._load_pause_credit >= 1.0:
                self._load_pause_credit -= 1.0
                host.pause(now, self.p.host_pause_load_s)
        self.cache.loading.discard(name)
        self.pending_tier.pop(name, None)
        reqs = self.pending.pop(name)
        for req in reqs:
            self._enqueue(req, now)
        if name == self.warm.current:
            self.warm.advance(now)

    def _retry_waiters(self, now: float) -> None:
        while self.ram_waiters:
            name = self.ram_waiters[0]
            if not self._register(name):
                return
            self.ram_waiters.popleft()
            self._after_register(name, now)

    def _finish(self, req: int, now: float) -> None:
        eng = self.eng
        name = eng.names[eng.adapter_of[req]]
        tokens = eng.prompt[req] + eng.output[req]
        self.running -= 1
        active = self.active
        if name in active:
            active[name] -= 1
            if active[name] <= 0:
                del active[name]
        self.tokens_in_flight -= tokens
        self.tokens_served[name] += eng.output[req]  # the agent counts generated tokens
        self.inflight.discard(req)
        eng.finish_time[req] = now
        if self.host is not None:
            self.host.submit(now, self.p.host_end_cpu_s)
        eng.on_finish(self, req, tokens)
        if self.merged is None and self.cache.release(name) and self.ram_waiters:
            self._retry_waiters(now)
