"""How every lorafleet process exposes its Prometheus metrics.

No `_created` series: prometheus_client adds one per counter and histogram child by default,
which doubles the per-tenant and per-adapter usage series for a value nothing here reads
(Prometheus detects counter resets without it). The switch is process-wide and read at
exposition time, so each process's metrics module calls `configure()` when it is imported.
"""

from __future__ import annotations

from prometheus_client import disable_created_metrics


def configure() -> None:
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
