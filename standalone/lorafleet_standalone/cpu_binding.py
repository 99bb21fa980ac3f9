"""Which cores each CPU vLLM engine of `lorafleet up` runs on.

vLLM's CPU build binds its worker's OpenMP threads itself (`VLLM_CPU_OMP_THREADS_BIND=auto`):
all of the cores it may use but the last, which it leaves to its scheduler process. Every
engine started that way picks the same cores, so with two engines (`--replicas 2`, a merged
pool) both workers shared core 0 while core 1 ran everything else (measured in
docs/guides/standalone.md, "CPU cores"). `up` therefore hands each engine its own cores:

- more cores than engines: the last core stays free for the gateway, the agents and vLLM's
  own EngineCore and API server processes (as vLLM's `auto` does for one engine), and the rest
  are split evenly, in contiguous runs, among the engines (a remainder core goes to the rest);
- as many cores as engines (two engines on two cores): one core each, none kept free. Two
  engines sharing one core cap their compute at one core together, while the other processes
  only need a share of a core between the engines' steps; the figures are in the docs;
- more engines than cores: one core each, round robin.

An engine started later (autoMerge creates a merged pool while `up` runs) takes the next share
round robin. Since 2026-12-06 the model runs in vLLM's engine-core process, not in a worker of
its own (processes.vllm_process): the whole engine is bound to its share by CPU affinity, with
one OpenMP thread per core of it. `VLLM_CPU_OMP_THREADS_BIND` set in `up`'s environment
overrides all of this: every engine runs vLLM's worker process with that value (`auto`: vLLM's
own choice; `nobind`: no binding; a list such as `0-3`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def engine_core_sets(cpus: Iterable[int], engines: int) -> list[list[int]]:
    """The cores each of `engines` engines binds to, out of `cpus` (the rule above)."""
    ordered = sorted(set(cpus))
    if engines < 1 or not ordered:
        return []
    shareable = ordered[:-1] if len(ordered) > engines else ordered
    if len(shareable) < engines:
        return [[shareable[i % len(shareable)]] for i in range(engines)]
    each = len(shareable) // engines
    return [shareable[i * each : (i + 1) * each] for i in range(engines)]


def cpu_list(cores: list[int]) -> str:
    """vLLM's CPU-list syntax: `0`, `0-3`, `0,2`."""
    runs: list[list[int]] = []
    for c in cores:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def parse_cpu_list(cpus: str) -> frozenset[int]:
    """A CPU list (`0`, `0-3`, `0,2`) as core ids."""
    cores: set[int] = set()
    for part in cpus.split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return frozenset(cores)


@dataclass
class EngineCores:
    """Hands out each engine's cores as `up` starts them; None when the user chose
    (`VLLM_CPU_OMP_THREADS_BIND` in the environment), so the engine inherits that value."""

    cpus: tuple[int, ...]
    expected: int  # engines `up` starts at once (shared replicas + merged pools' replicas)
    user_choice: str | None = None
    _handed: int = field(default=0, init=False)

    @classmethod
    def of_this_process(cls, expected: int, env: Mapping[str, str] | None = None) -> EngineCores:
        env = os.environ if env is None else env
        return cls(tuple(sorted(os.sched_getaffinity(0))), expected, env.get(BIND_ENV))

    def next(self) -> str | None:
        if self.user_choice is not None:
            return None
        sets = engine_core_sets(self.cpus, max(self.expected, 1))
        if not sets:
            return None
        cores = sets[self._handed % len(sets)]
        self._handed += 1
        return cpu_list(cores)

    def describe(self) -> str:
        """One line for `up`'s output: what binding the engines get."""
        if self.user_choice is not None:
            return f"{BIND_ENV}={self.user_choice} (from the environment) for every engine"
        sets = engine_core_sets(self.cpus, max(self.expected, 1))
        engines = ", ".join(cpu_list(s) for s in sets)
        free = sorted(set(self.cpus) - {c for s in sets for c in s})
        rest = f"; core(s) {cpu_list(free)} for the rest" if free else ""
        return f"engines on core(s) {engines}{rest} (override: {BIND_ENV})"
