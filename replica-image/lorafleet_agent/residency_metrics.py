"""Where this replica holds its adapters, read from the manager at scrape time.

Always: `lorafleet_agent_resident_adapters{tier}`, how many adapters each tier holds (3 series).

Opt-in (`LORAFLEET_AGENT_RESIDENCY_INFO=true`): `lorafleet_agent_adapter_residency_info`, in the
shape the Gateway API Inference Extension's model-server protocol gives `vllm:lora_requests_info`
(one gauge whose value is the time it was read, the adapters a comma-separated label, the tier's
capacity another), one series for `gpu` and one for `ram`. vLLM's own family names only adapters
with queued or running requests; this one names what an external scheduler wants for affinity:
every adapter a request would find without a load. Off by default: its label values run to
`max_adapters` ids (kilobytes), and every change of the set is a new series in the TSDB. The
disk tier is never listed by id: it holds as many adapters as the cache's bytes allow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lorafleet_core.planning.cache_policy import SlotTracker
from lorafleet_core.wire.tiers import Tier

COUNTED = (Tier.GPU, Tier.RAM, Tier.DISK)
LISTED = (Tier.GPU, Tier.RAM)


def _nothing() -> dict[Tier, list[str]]:
    return {}


class ResidencyCollector(Collector):
    """Registered with the agent's metrics before the manager exists; `follow` wires it up."""

    def __init__(self) -> None:
        self.resident: Callable[[], dict[Tier, list[str]]] = _nothing
        self.slots: SlotTracker | None = None
        self.info = False

    def follow(
        self, resident: Callable[[], dict[Tier, list[str]]], slots: SlotTracker, info: bool
    ) -> None:
        """Read `resident()` at each scrape; `slots`: what the gpu and ram tiers hold at most."""
        self.resident, self.slots, self.info = resident, slots, info

    def collect(self) -> Iterator[Metric]:
        # The agent serves /metrics from its event loop, the thread that changes the tiers.
        resident = self.resident()
        counts = GaugeMetricFamily(
            "lorafleet_agent_resident_adapters",
            "Adapters held, by the fastest tier each is in (a merged adapter counts as gpu)",
            labels=["tier"],
        )
        for tier in COUNTED:
            counts.add_metric([tier.value], len(resident.get(tier, ())))
        yield counts
        if not self.info:
            return
        listed = GaugeMetricFamily(
            "lorafleet_agent_adapter_residency_info",
            "Adapters in the gpu and ram tiers (label `adapters`, sorted, comma-separated) and "
            "the tier's capacity (`max_adapters`); the value is when it was read. Only with "
            "LORAFLEET_AGENT_RESIDENCY_INFO=true",
            labels=["tier", "adapters", "max_adapters"],
        )
        capacity = {
            Tier.GPU: self.slots.gpu_slots if self.slots else 0,
            Tier.RAM: self.slots.cpu_slots if self.slots else 0,
        }
        now = time.time()
        for tier in LISTED:
            ids = ",".join(sorted(resident.get(tier, ())))
            listed.add_metric([tier.value, ids, str(capacity[tier])], now)
        yield listed
