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
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from lorafleet_core.secret_file import SecretFile

log = logging.getLogger(__name__)

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
        self._accounts = service_accounts
        self._api = api
        self._clock = clock
        self._reviewed: dict[bytes, float] = {}  # digest of an accepted SA token -> until

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
        return await self._service_account(offered, digest)

    async def _service_account(self, token: str, digest: bytes) -> bool:
        if not self._accounts or self._api is None:
            return False
        now = self._clock()
        until = self._reviewed.get(digest)
        if until is not None and until > now:
            return True
        user = await self._review(token)
        allowed = user is not None and _account(user) in self._accounts
        if allowed:
            if len(self._reviewed) > 1024:  # bounded: drop expired entries
                self._reviewed = {d: t for d, t in self._reviewed.items() if t > now}
            self._reviewed[digest] = now + REVIEW_CACHE_S
        return allowed

    async def _review(self, token: str) -> str | None:
        """The username the API server says the token belongs to; None if not authenticated."""
        assert self._api is not None
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        try:
            api = await self._api()
            result: Any = await client.AuthenticationV1Api(api).create_token_review(body)
        except Exception as exc:  # the API server unreachable: refuse, say why in the log
            log.warning("TokenReview failed: %r", exc)
            return None
        status = result.get("status") if isinstance(result, dict) else result.status
        if isinstance(status, dict):
            user = status.get("user") or {}
            ok, name = bool(status.get("authenticated")), user.get("username")
        else:
            ok = bool(status is not None and status.authenticated)
            user_info = status.user if status is not None else None
            name = user_info.username if ok and user_info is not None else None
        return str(name) if ok and name else None


def _account(username: str) -> str:
    """`system:serviceaccount:ns:name` -> `ns:name` (other users map to "")."""
    prefix = "system:serviceaccount:"
    return username[len(prefix) :] if username.startswith(prefix) else ""


def parse_accounts(value: str) -> frozenset[str]:
    return frozenset(a.strip() for a in value.split(",") if a.strip())
