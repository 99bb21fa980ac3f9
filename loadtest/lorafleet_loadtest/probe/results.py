"""What one request measured and marker checking (pure); the load test's figures are in
lorafleet_loadtest.stats."""

from __future__ import annotations

from dataclasses import dataclass

from lorafleet_core.wire.tiers import TIER_NAMES

TIER_ORDER = (*TIER_NAMES, "?")  # "?": the answer named no tier


@dataclass(slots=True)
class RequestResult:
    index: int
    alias: str
    scheduled_at: float  # seconds after the run's start, as planned
    started_at: float  # when it was really sent (later when the concurrency cap held it)
    status: str  # "200", "429", "503", ..., "connection", "timeout", "stream_error"
    ttft_s: float | None = None
    total_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tier: str | None = None
    replica: str | None = None
    adapter_id: str | None = None
    text: str = ""
    marker_ok: bool | None = None  # None: no marker known for the alias, or no answer
    finish_reason: str | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "200"


def marker_matches(text: str, marker: str | None, *, truncated: bool = False) -> bool | None:
    """Whether the answer carries the adapter's canary marker (None when none is known).

    An answer cut off by `max_tokens` (`truncated`) before the whole marker came out still
    matches when it is a non-empty beginning of the marker: a wrong adapter answers its own.
    """
    if marker is None:
        return None
    if marker in text:
        return True
    head = text.strip()
    return truncated and bool(head) and marker.startswith(head)
