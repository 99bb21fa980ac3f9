"""The four places an adapter can be on a replica, fastest first."""

from enum import StrEnum
from typing import Final


class Tier(StrEnum):
    """Where a replica found an adapter when a request arrived.

    gpu: registered in a vLLM GPU LoRA slot; ram: in vLLM's host-RAM LoRA cache;
    disk: in the agent's cache folder; remote: only in the object store.
    """

    GPU = "gpu"
    RAM = "ram"
    DISK = "disk"
    REMOTE = "remote"


# The tiers' names, fastest first, for reports and tables keyed by plain strings (and the
# simulator's tier codes 0..3); `LoRAAdapter.status.placements[].tier` takes the same values.
TIER_NAMES: Final = tuple(t.value for t in Tier)
_ORDER = tuple(Tier)


def slowest(*tiers: Tier | None) -> Tier:
    """The slowest of the given tiers (None ignored; gpu when none is given).

    A request that waited for an on-demand load from `remote` and then found the adapter in
    `ram` paid for the remote fetch: its tier is the slowest place it had to get it from.
    """
    present = [t for t in tiers if t is not None]
    return max(present, key=_ORDER.index) if present else Tier.GPU


def parse_tier(value: str | None) -> Tier | None:
    """A tier from a header or an answer; None when absent or not a tier."""
    try:
        return Tier(value) if value is not None else None
    except ValueError:
        return None


# Not a cache tier: the answer came from a replica of a merged pool, which serves the adapter
# merged into its base weights (no LoRA slot at all). The gateway sets it from its routing.
MERGED_TIER = "merged"
