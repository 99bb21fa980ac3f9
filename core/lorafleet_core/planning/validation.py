"""The outcome of validating an adapter against the pools (planning.adapters decides it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Validation:
    """Outcome of validating one adapter; `final` means Rejected for good."""

    ok: bool
    reason: str
    message: str
    pool: str | None = None
    final: bool = False
