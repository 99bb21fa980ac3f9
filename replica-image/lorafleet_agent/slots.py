"""Estimating which adapters sit in vLLM's GPU slots and host-RAM cache (pure, no I/O).

vLLM does not report its LoRA slots, so the agent replays what vLLM does with them:

- `POST /v1/load_lora_adapter` loads the adapter into the worker's CPU cache (capacity
  `--max-cpu-loras`, LRU): this is tier "ram".
- When a batch uses an adapter, vLLM activates it into a GPU slot (capacity `--max-loras`,
  LRU over the adapters of recent batches, evicting the least recently activated one) and
  touches it in the CPU cache: tier "gpu".
- Evicting from the CPU cache also frees the adapter's GPU slot.

The agent sees every registration and every request it forwards, in order, so replaying them
through two LRUs of the same capacities gives vLLM's state, up to the ordering of requests
inside one batch (concurrent requests may activate in a different order than they arrived).
The agent keeps the number of registered adapters <= cpu slots itself, so vLLM never evicts
from its CPU cache behind the agent's back.
"""

from __future__ import annotations

from collections import OrderedDict

from lorafleet_core.tiers import Tier


class SlotTracker:
    def __init__(self, gpu_slots: int, cpu_slots: int) -> None:
        self.gpu_slots = gpu_slots
        self.cpu_slots = cpu_slots
        self._cpu: OrderedDict[str, None] = OrderedDict()  # registered with vLLM, LRU first
        self._gpu: OrderedDict[str, None] = OrderedDict()  # estimated GPU slots, LRU first

    def register(self, adapter_id: str) -> list[str]:
        """vLLM loaded the adapter into its CPU cache; returns ids vLLM itself would evict."""
        self._cpu[adapter_id] = None
        self._cpu.move_to_end(adapter_id)
        evicted = []
        while len(self._cpu) > self.cpu_slots:
            old, _ = self._cpu.popitem(last=False)
            self._gpu.pop(old, None)
            evicted.append(old)
        return evicted

    def unregister(self, adapter_id: str) -> None:
        self._cpu.pop(adapter_id, None)
        self._gpu.pop(adapter_id, None)

    def use(self, adapter_id: str) -> None:
        """A request for the adapter was forwarded: vLLM activates it into a GPU slot."""
        if adapter_id not in self._cpu:
            raise KeyError(f"{adapter_id} is not registered")
        self._cpu.move_to_end(adapter_id)
        self._gpu[adapter_id] = None
        self._gpu.move_to_end(adapter_id)
        while len(self._gpu) > self.gpu_slots:
            self._gpu.popitem(last=False)

    def tier(self, adapter_id: str) -> Tier | None:
        """gpu or ram when registered, else None (the caller knows about disk and remote)."""
        if adapter_id in self._gpu:
            return Tier.GPU
        if adapter_id in self._cpu:
            return Tier.RAM
        return None

    def registered(self) -> list[str]:
        """Registered adapters, least recently used first."""
        return list(self._cpu)

    def gpu(self) -> list[str]:
        return list(self._gpu)

    def ram_only(self) -> list[str]:
        return [a for a in self._cpu if a not in self._gpu]

    def is_registered(self, adapter_id: str) -> bool:
        return adapter_id in self._cpu
