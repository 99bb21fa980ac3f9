"""Whose ServiceAccount token is this? The API server's answer (TokenReview), checked and cached.

One home for the check, used by the control API (pipelines calling it) and the replica agent
(the gateway and operator calling its load/unload). A token passes only when the API server
says it is `authenticated`, it was issued for one of the wanted audiences (a projected token
for `lorafleet-agent` is useless against anything else, and a token stolen from elsewhere is
useless here), and its user is one of the allowed `namespace:name` ServiceAccounts.

Positive answers are cached for a short time, keyed by the token's sha256 (the token itself is
never kept), in a bounded map, so a busy gateway costs one review per token per `cache_s`, not
one per call. Refusals are not cached: a token that becomes valid is accepted at once.

When the API server cannot be asked (unreachable, 5xx, 403 for missing RBAC), the answer is
`unavailable`: callers refuse the call (fail closed) and say why, never let it through.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client

log = logging.getLogger(__name__)

SA_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class ReviewVerdict:
    allowed: bool
    # Why not, for the caller's 401/503 body: says which check failed, never the token.
    reason: str = ""
    unavailable: bool = False  # the API server could not be asked: fail closed


ALLOWED = ReviewVerdict(True)


def service_account_of(username: str) -> str:
    """`system:serviceaccount:ns:name` -> `ns:name` (other users map to "")."""
    return username[len(SA_PREFIX) :] if username.startswith(SA_PREFIX) else ""


def parse_accounts(value: str) -> frozenset[str]:
    """A comma-separated `namespace:name` list (settings, chart values)."""
    return frozenset(a.strip() for a in value.split(",") if a.strip())


class TokenReviewer:
    def __init__(
        self,
        api: Callable[[], Awaitable[client.ApiClient]],
        *,
        accounts: Iterable[str],
        audiences: Iterable[str] = (),
        cache_s: float = 30.0,
        cache_max: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 5.0,
    ) -> None:
        self._api = api
        # A black-holed API server must not hold the caller for minutes: fail closed sooner.
        self.timeout_s = timeout_s
        self.accounts = frozenset(accounts)
        self.audiences = tuple(audiences)
        self._cache_s = cache_s
        self._cache_max = cache_max
        self._clock = clock
        self._accepted: OrderedDict[bytes, float] = OrderedDict()  # sha256(token) -> until
        self.reviews = 0  # TokenReviews sent (the agent exports it as a metric)

    async def check(self, token: str) -> ReviewVerdict:
        if not token:
            return ReviewVerdict(False, "no token")
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        until = self._accepted.get(digest)
        if until is not None:
            if until > now:
                return ALLOWED
            del self._accepted[digest]
        verdict = await self._review(token)
        if verdict.allowed:
            self._remember(digest, now)
        return verdict

    def _remember(self, digest: bytes, now: float) -> None:
        self._accepted[digest] = now + self._cache_s
        self._accepted.move_to_end(digest)
        while len(self._accepted) > self._cache_max:  # bounded: the oldest entry goes first
            self._accepted.popitem(last=False)

    async def _review(self, token: str) -> ReviewVerdict:
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        self.reviews += 1
        try:
            api = await self._api()
            result: Any = await client.AuthenticationV1Api(api).create_token_review(
                body, _request_timeout=self.timeout_s
            )
            review = result if isinstance(result, dict) else api.sanitize_for_serialization(result)
        except Exception as exc:  # unreachable, 5xx, or no RBAC: refuse, and say so
            log.warning("TokenReview failed, refusing the call: %r", exc)
            return ReviewVerdict(
                False, "the Kubernetes API server could not verify the token", unavailable=True
            )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return ReviewVerdict(False, "the token is not authenticated (expired or unknown)")
        offered = status.get("audiences") or []
        # An audience-aware API server answers the subset of ours the token is valid for.
        if self.audiences and not set(offered) & set(self.audiences):
            return ReviewVerdict(False, f"the token is not issued for {self.audiences[0]}")
        username = str((status.get("user") or {}).get("username") or "")
        account = service_account_of(username)
        if not account or account not in self.accounts:
            shown = account or "a user that is not a ServiceAccount"
            return ReviewVerdict(False, f"{shown[:120]} is not an allowed ServiceAccount")
        return ALLOWED
