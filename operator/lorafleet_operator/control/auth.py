"""Who may call the control API: the admin token, or an allowed ServiceAccount (TokenReview).

The admin token is never configured in clear: the settings hold its sha256 (or a file with it,
a mounted Secret re-read when it changes), and the offered token's sha256 is compared in
constant time. On a cluster a caller may instead present its ServiceAccount token (a pipeline
running in a pod); the API server says whose it is (TokenReview, through the one Kubernetes
client) and only the accounts listed in `control_service_accounts` pass. Positive reviews are
cached for a short time so a busy pipeline costs one review per minute, not one per call.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from kubernetes_asyncio import client

from lorafleet_core.kube.token_review import TokenReviewer, parse_accounts
from lorafleet_core.web.secret_file import SecretFile

__all__ = ["REVIEW_CACHE_S", "ControlAuth", "parse_accounts", "token_sha256"]

REVIEW_CACHE_S = 60.0


def token_sha256(token: str) -> str:
    """The hex digest the settings hold for a token (`lorafleet up` writes it this way)."""
    return hashlib.sha256(token.encode()).hexdigest()


class ControlAuth:
    def __init__(
        self,
        token_sha256: str | None,
        token_sha256_file: Path | None,
        *,
        service_accounts: frozenset[str] = frozenset(),
        api: Callable[[], Awaitable[client.ApiClient]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fixed = bytes.fromhex(token_sha256) if token_sha256 else None
        self._file = (
            SecretFile(token_sha256_file, bytes.fromhex) if token_sha256_file is not None else None
        )
        # Who the token belongs to is the API server's answer (lorafleet_core.kube.token_review).
        self._reviewer = (
            TokenReviewer(api, accounts=service_accounts, cache_s=REVIEW_CACHE_S, clock=clock)
            if service_accounts and api is not None
            else None
        )

    def _expected(self) -> bytes | None:
        if self._fixed is not None:
            return self._fixed
        # An unreadable file refuses admin tokens until it is back.
        return self._file.current() if self._file is not None else None

    async def allows(self, authorization: str | None) -> bool:
        scheme, _, offered = (authorization or "").partition(" ")
        offered = offered.strip()
        if scheme.lower() != "bearer" or not offered:
            return False
        digest = hashlib.sha256(offered.encode()).digest()
        expected = self._expected()
        if expected is not None and hmac.compare_digest(digest, expected):
            return True
        return await self._service_account(offered)

    async def _service_account(self, token: str) -> bool:
        if self._reviewer is None:
            return False
        return (await self._reviewer.check(token)).allowed
