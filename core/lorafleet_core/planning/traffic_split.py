"""Which version of a weighted alias serves one request: the one choice, for every router.

The gateway's catalog (files and kube backends alike) and any future endpoint picker call
`choose_version`; the simulator may too. It is pure: the only randomness is the `draw` passed
in, so tests seed it.

A request that names its end user (OpenAI's `user`, else `safety_identifier`) is placed by a
stable hash of (alias, user) into one of 100 buckets, so the user keeps one version while the
weights are unchanged, whichever gateway pod answers; without a user the bucket is a random
draw. Buckets fill in `spec.split` order from 0 and the primary takes the rest, so raising a
weight (5 -> 50) only moves users onto that version, never off it, and lowering it only moves
them back to the primary.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

BUCKETS = 100  # weights are whole percent
USER_FIELDS = ("user", "safety_identifier")  # OpenAI's end-user fields, in order of preference
_USER_MAX = 1024  # longer names are hashed all the same; the bound only keeps hashing cheap

Draw = Callable[[int], int]  # draw(n): a uniform integer in 0..n-1 (random.Random.randrange)
_SYSTEM = random.Random()  # noqa: S311 (traffic splitting, not security)


def user_of(body: Mapping[str, Any]) -> str | None:
    """The end user a request names (`user`, else `safety_identifier`), or None."""
    for name in USER_FIELDS:
        value = body.get(name)
        if isinstance(value, str) and value:
            return value[:_USER_MAX]
    return None


def bucket(alias: str, user: str | None, draw: Draw | None = None) -> int:
    """The request's bucket in 0..99: stable for (alias, user), else drawn."""
    if user is None:
        return (draw or _SYSTEM.randrange)(BUCKETS)
    digest = hashlib.blake2b(f"{alias}\0{user}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % BUCKETS


def choose_version(
    alias: str,
    primary: str,
    split: Sequence[tuple[str, int]],
    user: str | None,
    draw: Draw | None = None,
) -> str:
    """The adapter version that serves one request for `alias` (the public model name).

    `primary` takes what `split` ((version, percent) pairs, as status.split) leaves."""
    if not split:
        return primary
    b = bucket(alias, user, draw)
    edge = 0
    for version, weight in split:
        edge += weight
        if b < edge:
            return version
    return primary
