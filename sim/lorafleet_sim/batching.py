"""vLLM's continuous batching in a simulated replica (a mixin of `Replica`).

vLLM is modelled step by step (continuous batching with chunked prefill): a step carries one
token for every decoding sequence plus prompt chunks, first come first served, up to
`step_token_budget` tokens (at most `long_prefill_token_threshold` of one prompt, when set);
it lasts `decode_s` (+ `decode_s_per_seq` per running sequence, 0 on a GPU), or
`prefill_step_s` (0 on a GPU) + `batched tokens / prefill_tps` when that is longer (prefill
is compute bound, decode memory bound). At most `max_seqs` sequences are in the batch, of at
most `gpu_slots` distinct adapters (vLLM's --max-loras check); more wait in vLLM's queue.
The first token comes at the end of the step that finishes the prompt, so TTFT = queueing +
adapter load + prefill (chunked, sharing steps with decodes) + `path_s`
(the hops outside vLLM, 0 by default).

With `host_cores` > 0 each streamed token and each first token's way back also cost the
replica's host CPU (see lorafleet_sim.replica).
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from lorafleet_core.planning.cache_policy import CachePolicy
from lorafleet_sim.host import HostCpu
from lorafleet_sim.params import ReplicaParams

if TYPE_CHECKING:
    from lorafleet_sim.engine import Engine


class VllmBatching:
    """The step loop of one replica's vLLM over the replica's state (set in Replica._reset)."""

    p: ReplicaParams
    eng: Engine
    cache: CachePolicy
    host: HostCpu | None
    merged: str | None
    epoch: int
    batch_decode_steps: bool
    waiting: deque[int]  # requests ready for vLLM, no sequence free yet
    prefill: deque[list[int]]  # [request, prompt tokens left], FIFO
    decoding: list[tuple[int, int]]  # heap of (last step, request)
    done_prefill: list[int]  # requests whose prompt ends with the current step
    running: int
    active: Counter[str]  # running sequences per adapter (--max-loras cap)
    step: int
    stepping: bool
    wake: int  # id of the one step event that counts; others are stale
    run_start: float
    run_steps: int
    run_step_s: float
    step_end: float
    busy_seq_s: float
    gpu_swaps: int
    queue_depth: int

    if TYPE_CHECKING:  # the replica's side: a sequence's end, the host's share of the path

        def _finish(self, req: int, now: float) -> None: ...
        def _path_cpu(self) -> tuple[float, float]: ...

    def _next_step(self, now: float) -> None:
        """Admit waiting requests into free sequences and start the next step, if any work."""
        eng = self.eng
        waiting = self.waiting
        if waiting and self.running < self.p.max_seqs:
            use = self.cache.use
            names, adapter_of, prompt = eng.names, eng.adapter_of, eng.prompt
            admitted = eng.admitted
            # vLLM's scheduler: at most --max-loras distinct adapters among running sequences;
            # a waiting request of another adapter is skipped (keeps its place), later ones
            # of running adapters go ahead. Only checked where it can bind.
            limit = self.p.gpu_slots if self.p.gpu_slots < self.p.max_seqs else 0
            active = self.active
            merged = self.merged is not None
            skipped: list[int] = []
            while waiting and self.running < self.p.max_seqs:
                req = waiting.popleft()
                name = names[adapter_of[req]]
                if limit:
                    if name not in active and len(active) >= limit:
                        skipped.append(req)
                        continue
                    active[name] += 1
                if not merged and use(name) is not None:
                    self.gpu_swaps += 1
                self.prefill.append([req, prompt[req]])
                admitted[req] = now
                self.running += 1
            if skipped:
                waiting.extendleft(reversed(skipped))
        if not self.running:
            self.stepping = False
            if self.host is not None:  # the engine idles: its threads stop competing
                self.host.engine_stepping(now, False)
            return
        if self.host is not None:
            self.host.engine_stepping(now, True)
        n_dec = len(self.decoding)
        if not self.prefill:
            # Decode only: every step is alike until the next sequence finishes, so schedule
            # that many steps as one event; an arrival meanwhile cuts it at the next step end
            # (_interrupt_run), exactly where a step-by-step loop would admit it.
            k = self.decoding[0][0] - self.step
            if k > 1 and self.batch_decode_steps:
                step_s = self._decode_step_s()
                self.done_prefill = []
                self.run_start, self.run_steps, self.run_step_s = now, k, step_s
                self.busy_seq_s += self.running * k * step_s
                self.stepping = True
                self.wake += 1
                self.step_end = now + k * step_s
                eng.schedule(self.step_end, self._run_end, self.wake)
                return
        budget = self.p.step_token_budget - n_dec
        taken = 0
        done: list[int] = []
        prefill = self.prefill
        cap = self.p.long_prefill_token_threshold or budget
        for entry in prefill:
            if taken >= budget:
                break
            take = min(entry[1], budget - taken, cap)
            entry[1] -= take
            taken += take
            if entry[1] == 0:
                done.append(entry[0])
        if cap < budget and done:
            # A capped long prompt keeps its place while shorter ones behind it finish.
            self.prefill = prefill = deque(entry for entry in prefill if entry[1])
        else:
            for _ in done:  # uncapped, the finished prompts are the first ones
                prefill.popleft()
        self.done_prefill = done
        duration = (n_dec + taken) / self.p.prefill_tps
        if taken:
            duration += self.p.prefill_step_s
        step_s = self._decode_step_s()
        if duration < step_s:
            duration = step_s
        self.busy_seq_s += self.running * duration
        self.stepping = True
        self.wake += 1
        self.step_end = now + duration
        eng.schedule(self.step_end, self._step_end, self.wake)

    def _decode_step_s(self) -> float:
        """One decode step of the running batch (per-sequence cost 0 on the design's GPU)."""
        return self.p.decode_s + self.p.decode_s_per_seq * self.running

    def _run_end(self, now: float, wake: int) -> None:
        if wake != self.wake:
            return
        self.step += self.run_steps - 1
        self.run_steps = 0
        self._step_end(now, wake)

    def _interrupt_run(self, now: float) -> None:
        """Cut a decode-only stretch at the end of the step in progress."""
        decode_s = self.run_step_s
        done = min(int((now - self.run_start) / decode_s), self.run_steps - 1)
        self.busy_seq_s -= self.running * (self.run_steps - done - 1) * decode_s
        self.step += done
        self.run_steps = 0
        self.wake += 1
        self.step_end = self.run_start + (done + 1) * decode_s
        self.eng.schedule(self.step_end, self._step_end, self.wake)

    def _step_end(self, now: float, wake: int) -> None:
        if wake != self.wake:
            return
        self.step += 1
        step = self.step
        eng = self.eng
        finish: Callable[[int, float], None] = self._finish
        decoding = self.decoding
        output = eng.output
        first = eng.first_token
        path_s = self.p.path_s
        host = self.host
        if host is not None and decoding:  # every decoding sequence streamed a token
            host.submit(now, self.p.host_token_cpu_s, count=len(decoding))
        for req in self.done_prefill:
            eng.engine_first[req] = now
            if host is None:
                first[req] = now + path_s
            else:
                host.submit(now, self._path_cpu()[1], self._delivered, (self.epoch, req))
            self.queue_depth -= 1
            out = output[req]
            if out <= 1:
                finish(req, now)
            else:
                heapq.heappush(decoding, (step + out - 1, req))
        while decoding and decoding[0][0] <= step:
            finish(heapq.heappop(decoding)[1], now)
        self._next_step(now)

    def _delivered(self, now: float, arg: tuple[int, int]) -> None:
        """The first token's path work is done on the host: the client sees it `path_s` on."""
        if arg[0] == self.epoch:
            self.eng.first_token[arg[1]] = now + self.p.path_s
