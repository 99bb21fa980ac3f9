"""The credential the internal port's mutating endpoints require (load, unload).

Who may post an adapter record decides which weights a tenant is served, so only the registry's
authority may: the gateway (on-demand loads) and `lorafleet up`/the operator hold the token; a
process that merely reaches the internal port does not. The token is a shared secret
(a Kubernetes Secret mounted as a file, re-read when the kubelet rotates it; a generated value in
standalone mode), compared in constant time. Read-only endpoints (`/state`, `/metrics`, probes)
stay open on the internal port: they change nothing, the gateway, the operator's autoscaler,
Prometheus and `lorafleet status` poll them, and the NetworkPolicy keeps the port in-cluster.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from pydantic import SecretStr

from lorafleet_core.secret_file import SecretFile


class MissingCredential(RuntimeError):
    """The agent was configured without a token and without explicitly allowing that."""


class InternalAuth:
    def __init__(
        self, token: SecretStr | None, token_file: Path | None, *, allow_unauthenticated: bool
    ) -> None:
        if token is None and token_file is None and not allow_unauthenticated:
            raise MissingCredential(
                "set LORAFLEET_AGENT_INTERNAL_TOKEN or LORAFLEET_AGENT_INTERNAL_TOKEN_FILE "
                "(or LORAFLEET_AGENT_ALLOW_UNAUTHENTICATED_INTERNAL=true for a throwaway test)"
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
        scheme, _, offered = (authorization or "").partition(" ")
        if expected is None or scheme.lower() != "bearer" or not offered:
            return False
        return hmac.compare_digest(_digest(offered.strip()), expected)


def _digest(value: str) -> bytes:
    # Comparing fixed-length digests keeps the comparison's time independent of the length.
    return hashlib.sha256(value.encode()).digest()
