"""Workloads written out request by request, for answers that can be worked out by hand."""

from __future__ import annotations

from lorafleet_sim.workload import Workload


def requests(*rows: tuple[float, int, int, int], names: tuple[str, ...] = ("a", "b")) -> Workload:
    """(arrival, prompt tokens, output tokens, adapter index) rows."""
    w = Workload(names=names, label="hand-made")
    for at, p, o, a in rows:
        w.at.append(at)
        w.prompt.append(p)
        w.output.append(o)
        w.adapter.append(a)
    return w
