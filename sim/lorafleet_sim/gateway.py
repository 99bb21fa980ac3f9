"""The gateway as the simulator runs it: 1 s-old polled state + its own in-flight counts.

Each simulated gateway pod keeps what `lorafleet_gateway.replica_poller.ReplicaTracker` keeps:
the last polled state of every healthy replica that is not still pre-warming (the engine
leaves those out, as the tracker does with a `warming` state) and the tokens of its own
requests in flight, blended by the gateway's own rule
(`lorafleet_gateway.router.blended_tokens`), and routes with the shipped `plan_route`. It also
keeps when it first saw each replica serving (`ReplicaView.serving_s`, read by the join-aware
`settle_s` rule): a replica absent from a poll round (dead, or still warming) joins afresh
when it returns. A replica that refuses a connection leaves its candidate set until the next
poll, as `mark_failed` does.
"""

from __future__ import annotations

from collections.abc import Mapping

from lorafleet_core.wire.replica_state import MergedServing
from lorafleet_gateway.router import ReplicaView, blended_tokens


class GatewayView:
    def __init__(self, merged: Mapping[str, MergedServing] | None = None) -> None:
        self.merged = merged or {}  # replica -> the merged weights its /state reports
        self.serving_since: dict[str, float] = {}
        self.serving_s: dict[str, float] = {}  # as of the last poll
        self.polled: dict[str, tuple[int, int, frozenset[str], frozenset[str]]] = {}
        self.local: dict[str, int] = {}
        self.local_at_poll: dict[str, int] = {}
        self.views: dict[str, ReplicaView] = {}

    def poll(
        self, now: float, states: list[tuple[str, int, int, frozenset[str], frozenset[str]]]
    ) -> None:
        """A poll round at `now` answered by `states` (replica, tokens in flight, queue, GPU
        adapters, adapters in RAM or on disk)."""
        local = self.local
        since = {rid: self.serving_since.get(rid, now) for rid, *_ in states}
        self.serving_since = since
        self.polled = {}
        self.views = {}
        for rid, tokens, queue, gpu, held in states:
            self.polled[rid] = (tokens, queue, gpu, held)
            mine = local.get(rid, 0)
            self.local_at_poll[rid] = mine
            self.serving_s[rid] = age = now - since[rid]
            self.views[rid] = ReplicaView(
                blended_tokens(tokens, mine, mine), queue, gpu, held, self.merged.get(rid), age
            )

    def _refresh(self, rid: str) -> None:
        polled = self.polled.get(rid)
        if polled is None or rid not in self.views:
            return
        tokens, queue, gpu, held = polled
        self.views[rid] = ReplicaView(
            blended_tokens(tokens, self.local[rid], self.local_at_poll[rid]),
            queue,
            gpu,
            held,
            self.merged.get(rid),
            self.serving_s[rid],
        )

    def begin(self, rid: str, tokens: int) -> None:
        self.local[rid] = self.local.get(rid, 0) + tokens
        self._refresh(rid)

    def end(self, rid: str, tokens: int) -> None:
        self.local[rid] = max(0, self.local.get(rid, 0) - tokens)
        self._refresh(rid)

    def mark_failed(self, rid: str) -> None:
        self.views.pop(rid, None)
