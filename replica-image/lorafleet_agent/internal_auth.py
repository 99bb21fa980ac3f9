"""The credential the internal port's mutating endpoints require (load, unload).

Who may post an adapter record decides which weights a tenant is served, so only the registry's
authority may: the gateway (on-demand loads) and `lorafleet up`/the operator. A process that
merely reaches the internal port may not. Two ways to prove it, chosen explicitly
(`internal_auth`):

- `tokenReview` (on a cluster): the caller sends its projected ServiceAccount token (audience
  `lorafleet-agent`, short-lived, rotated by the kubelet); the API server says whose it is
  (lorafleet_core.kube.token_review) and only the configured accounts pass. No shared secret exists
  to leak, and a token copied from the gateway pod expires within the hour. When the API server
  cannot be asked, calls are refused with 503 (fail closed), never let through.
- `secret` (standalone mode, or a cluster fallback): a shared token (a generated value, or a
  mounted Secret re-read when it rotates), compared in constant time.

Read-only endpoints (`/state`, `/metrics`, probes) stay open on the internal port: they change
nothing, the gateway, the operator's autoscaler, Prometheus and `lorafleet status` poll them,
and the NetworkPolicy keeps the port in-cluster.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kubernetes_asyncio import client
from pydantic import SecretStr

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.kube.token_review import TokenReviewer, parse_accounts
from lorafleet_core.web.secret_file import SecretFile


class MissingCredential(RuntimeError):
    """The agent was configured without a credential and without explicitly allowing that."""


@dataclass(frozen=True)
class Refusal:
    status: int  # 401: no or a wrong credential; 503: it could not be verified now
    message: str


class Authenticator(Protocol):
    async def check(self, authorization: str | None) -> Refusal | None:
        """None when the call may proceed, else why not."""


def _bearer(authorization: str | None) -> str:
    scheme, _, offered = (authorization or "").partition(" ")
    return offered.strip() if scheme.lower() == "bearer" else ""


NO_CREDENTIAL = Refusal(401, "a valid internal credential is required")


class InternalAuth:
    """A shared token: the internal port's `secret` mode, and the data port's only mode
    (lorafleet_agent.data_auth). `setting` names the environment variables in the error."""

    def __init__(
        self,
        token: SecretStr | None,
        token_file: Path | None,
        *,
        allow_unauthenticated: bool,
        setting: str = "INTERNAL",
    ) -> None:
        if token is None and token_file is None and not allow_unauthenticated:
            p = "LORAFLEET_AGENT_"
            raise MissingCredential(
                f"set {p}{setting}_TOKEN or {p}{setting}_TOKEN_FILE "
                f"(or {p}ALLOW_UNAUTHENTICATED_{setting}=true for a throwaway test)"
            )
        self._fixed = _digest(token.get_secret_value()) if token is not None else None
        self._file = SecretFile(token_file, _digest) if token_file is not None else None
        self.required = token is not None or token_file is not None

    def _expected(self) -> bytes | None:
        if self._fixed is not None:
            return self._fixed
        # An unreadable file refuses everything until it is back.
        return self._file.current() if self._file is not None else None

    def allows(self, authorization: str | None) -> bool:
        """True when `authorization` is `Bearer <the token>` (or no credential is required)."""
        if not self.required:
            return True
        expected = self._expected()
        offered = _bearer(authorization)
        if expected is None or not offered:
            return False
        return hmac.compare_digest(_digest(offered), expected)

    async def check(self, authorization: str | None) -> Refusal | None:
        return None if self.allows(authorization) else NO_CREDENTIAL


class ReviewedAuth:
    """`tokenReview` mode: a ServiceAccount token the API server vouches for."""

    def __init__(self, reviewer: TokenReviewer) -> None:
        if not reviewer.accounts:
            raise MissingCredential(
                "internal_auth=tokenReview needs LORAFLEET_AGENT_INTERNAL_SERVICE_ACCOUNTS "
                "(the gateway's and the operator's namespace:name)"
            )
        self.reviewer = reviewer

    async def check(self, authorization: str | None) -> Refusal | None:
        token = _bearer(authorization)
        if not token:
            return NO_CREDENTIAL
        verdict = await self.reviewer.check(token)
        if verdict.allowed:
            return None
        if verdict.unavailable:
            return Refusal(503, f"{verdict.reason}; refusing until it can (fail closed)")
        return Refusal(401, f"a valid internal credential is required: {verdict.reason}")


def build_internal_auth(
    s: AgentSettings, api: Callable[[], Awaitable[client.ApiClient]]
) -> Authenticator:
    if s.internal_auth == "tokenReview":
        return ReviewedAuth(
            TokenReviewer(
                api,
                accounts=parse_accounts(s.internal_service_accounts),
                audiences=(s.internal_audience,),
                cache_s=s.internal_review_cache_s,
            )
        )
    return InternalAuth(
        s.internal_token,
        s.internal_token_file,
        allow_unauthenticated=s.allow_unauthenticated_internal,
    )


def _digest(value: str) -> bytes:
    # Comparing fixed-length digests keeps the comparison's time independent of the length.
    return hashlib.sha256(value.encode()).digest()
