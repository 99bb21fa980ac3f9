"""Bytes of request bodies being received at once, per key and on the whole pod.

The edge reads each body whole before any route runs (edge.py), and a client with a valid key
may hold its body open for up to `body_timeout_s` with all but the last byte sent. Nothing
else bounded how many such bodies a key had in transit: the concurrency cap and the rate
limits are taken after the body, by the route. 400 connections holding 1 MB bodies under one
key grew a gateway by 375 MiB; 1,100 would take a pod past its 1 GiB limit and every tenant's
streams with it. So the bytes received and not yet handed to a route are counted:

- per key (`max_buffered_body_bytes_per_key`, 64 MiB: 64 full-size bodies at once): past it
  that key's next chunk is answered 429 `concurrency_limit_exceeded`, its own problem;
- on the pod (`max_buffered_body_bytes`, 256 MiB): past it 503 `server_busy`, the backstop
  against many keys at once.

Counted as bytes arrive (a body declared large that sends little costs little) and given back
once the body is complete or refused. A body that has been handed to its route is bounded by
the tenant's concurrency cap from then on.
"""

from __future__ import annotations


class BodyBudget:
    """Bytes in transit per key digest and in all; a key with none has no entry."""

    def __init__(self, per_key: int, total: int) -> None:
        self.per_key = per_key
        self.total = total
        self.in_transit = 0
        self._by_key: dict[str, int] = {}

    def take(self, key: str, n: int) -> str | None:
        """Count `n` more bytes of `key`; else which bound it would pass ("key", "total"),
        counting nothing."""
        held = self._by_key.get(key, 0)
        if held + n > self.per_key:
            return "key"
        if self.in_transit + n > self.total:
            return "total"
        self._by_key[key] = held + n
        self.in_transit += n
        return None

    def give_back(self, key: str, n: int) -> None:
        if n <= 0:
            return
        left = self._by_key.get(key, 0) - n
        if left > 0:
            self._by_key[key] = left
        else:
            self._by_key.pop(key, None)
        self.in_transit -= n

    def held_by(self, key: str) -> int:
        return self._by_key.get(key, 0)

    def __len__(self) -> int:
        return len(self._by_key)
