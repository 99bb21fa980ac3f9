"""Which replicas own an adapter: rendezvous (highest-random-weight) hashing.

Each (adapter, replica) pair gets a score from a stable hash; an adapter's owners are the k
replicas with the highest scores. Adding a replica moves only the placements it now wins
(about k/(N+1) of them); removing one moves only its own. No coordination or stored table:
the operator, the gateway and standalone mode compute the same owners from the same inputs.

The hash is blake2b (stable across processes and machines; Python's hash() is salted per
process and would give every gateway a different answer). Precisely, the weight of a pair is
    blake2b(utf8(adapter_id) + b"\x00" + utf8(replica_id), digest_size=8)
read as a big-endian unsigned integer; higher wins, and equal weights (never seen in practice)
go to the larger replica id. Any implementation in another language must match this.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence


def _digest(prefix: bytes, replica_id: str) -> bytes:
    # Separator byte keeps ("ab","c") and ("a","bc") apart.
    return hashlib.blake2b(prefix + replica_id.encode(), digest_size=8).digest()


def _scored(adapter_id: str, replica_ids: Sequence[str]) -> list[tuple[bytes, str]]:
    """(weight, replica) for each distinct replica.

    Weights stay 8-byte big-endian digests: comparing them as bytes orders them exactly like
    their integer values and saves an int conversion per replica (owners() at 1,000 replicas
    runs on every gateway request).
    """
    prefix = adapter_id.encode() + b"\x00"
    return [(_digest(prefix, r), r) for r in set(replica_ids)]


def owners(adapter_id: str, replica_ids: Sequence[str], k: int) -> list[str]:
    """The k replicas that own `adapter_id`, best first (all of them when fewer than k).

    Ties (astronomically rare with 64-bit scores) break on the replica id, so the result is a
    pure function of its inputs and independent of the order of `replica_ids`.
    """
    if k <= 0 or not replica_ids:
        return []
    return [r for _, r in heapq.nlargest(k, _scored(adapter_id, replica_ids))]


def ranked(adapter_id: str, replica_ids: Sequence[str]) -> list[str]:
    """Every replica in rendezvous order for `adapter_id` (owners first, then spill order)."""
    return [r for _, r in sorted(_scored(adapter_id, replica_ids), reverse=True)]
