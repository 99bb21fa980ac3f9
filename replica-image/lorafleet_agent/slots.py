"""The agent's estimate of vLLM's GPU slots and host-RAM cache.

The policy lives in the shared core (`lorafleet_core.planning.cache_policy`) so the fleet simulator
drives the same code; this module keeps the agent's import path.
"""

from __future__ import annotations

from lorafleet_core.planning.cache_policy import SlotTracker

__all__ = ["SlotTracker"]
