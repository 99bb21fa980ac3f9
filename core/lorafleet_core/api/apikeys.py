"""Tenants, their API keys (as hashes only) and rate limits.

Keys are 256-bit random tokens (`lf-<base64url>`). With that much entropy a single sha256 is a
sound way to store them (a slow KDF protects low-entropy passwords, which these are not), and it
keeps verification at one hash per request. The plaintext key is shown once by
`lorafleet keys create` and never stored, logged or exported as a metric.

Storage, the Kubernetes way: one Secret per tenant, labelled `lorafleet.dev/api-keys: "true"`,
with string data:
    tenant              the tenant name
    keyHashes           one `sha256:<hex>` per line (several allow rotation)
    requestsPerSecond   optional override of the gateway default
    tokensPerMinute     optional override of the gateway default
    maxConcurrentRequests  optional override of the gateway default: requests (streams
                        included) the tenant may have running at once on one gateway pod
Standalone mode keeps the same Secret manifests as YAML files in its manifests folder.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from lorafleet_core.api.models import DNS_LABEL, SHA256_REF
from lorafleet_core.api.names import API_KEYS_SECRET_LABEL

KEY_PREFIX = "lf-"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeyConflict:
    """A key hash listed under more than one tenant (shortened: a report, not a secret)."""

    hash_prefix: str
    tenants: tuple[str, ...]


def generate_key() -> str:
    """A new random API key (shown to the user once)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


KeyHash = Annotated[str, StringConstraints(pattern=SHA256_REF)]


class TenantKeys(BaseModel):
    # allow_inf_nan: a limit of "inf" or "nan" in a Secret would reach the rate limiter's
    # arithmetic (and the Redis script) as a number.
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tenant: str = Field(pattern=DNS_LABEL, max_length=63)
    # Validated per item so a malformed line fails as a pydantic ValidationError naming it.
    key_hashes: tuple[KeyHash, ...] = Field(min_length=1)
    requests_per_second: float | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)
    max_concurrent_requests: int | None = Field(default=None, gt=0)

    def to_secret(self, namespace: str | None = None) -> dict[str, Any]:
        """A Secret manifest (stringData) carrying only the hashes."""
        data: dict[str, str] = {"tenant": self.tenant, "keyHashes": "\n".join(self.key_hashes)}
        if self.requests_per_second is not None:
            data["requestsPerSecond"] = str(self.requests_per_second)
        if self.tokens_per_minute is not None:
            data["tokensPerMinute"] = str(self.tokens_per_minute)
        if self.max_concurrent_requests is not None:
            data["maxConcurrentRequests"] = str(self.max_concurrent_requests)
        meta: dict[str, Any] = {
            "name": f"lorafleet-keys-{self.tenant}",
            "labels": {API_KEYS_SECRET_LABEL: "true"},
        }
        if namespace:
            meta["namespace"] = namespace
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta,
            "type": "Opaque",
            "stringData": data,
        }

    @classmethod
    def from_secret(cls, secret: Mapping[str, Any]) -> TenantKeys:
        """From a Secret manifest or API object (`stringData` or base64 `data`)."""
        fields: dict[str, str] = dict(secret.get("stringData") or {})
        for k, v in (secret.get("data") or {}).items():
            fields.setdefault(k, base64.b64decode(v).decode())
        rps = fields.get("requestsPerSecond")
        tpm = fields.get("tokensPerMinute")
        concurrent = fields.get("maxConcurrentRequests")
        return cls(
            tenant=fields["tenant"],
            key_hashes=tuple(
                h.strip() for h in fields.get("keyHashes", "").splitlines() if h.strip()
            ),
            requests_per_second=float(rps) if rps else None,
            tokens_per_minute=int(tpm) if tpm else None,
            max_concurrent_requests=int(concurrent) if concurrent else None,
        )


class KeyIndex:
    """Look up the tenant of a presented key by its hash, comparing in constant time.

    A hash listed under two tenants is refused for both: either answer would be a guess, and
    the wrong one lets a key act as another tenant. Each such hash is reported (logged here,
    listed in `conflicts`, tenants named, the hash shortened); the rest of the index serves.
    Refusing the whole index instead would let one bad Secret lock every tenant out.
    """

    def __init__(self, tenants: Iterable[TenantKeys] = ()) -> None:
        self._by_hash: dict[str, TenantKeys] = {}
        claims: dict[str, set[str]] = {}
        for t in tenants:
            for h in t.key_hashes:
                claims.setdefault(h, set()).add(t.tenant)
                self._by_hash[h] = t
        conflicts = []
        for h, names in claims.items():
            if len(names) > 1:
                del self._by_hash[h]
                conflicts.append(KeyConflict(h[:19] + "\u2026", tuple(sorted(names))))
                log.error(
                    "API key %s… is listed under tenants %s: refused for all of them until "
                    "one Secret drops it",
                    h[:19],
                    ", ".join(sorted(names)),
                )
        self.conflicts: tuple[KeyConflict, ...] = tuple(conflicts)

    def tenant_for(self, presented_key: str) -> TenantKeys | None:
        """The tenant owning `presented_key`, or None.

        The dict lookup is on the hash of the key, which reveals nothing usable about stored
        hashes through timing; the final compare_digest guards the match itself.
        """
        presented = hash_key(presented_key)
        found = self._by_hash.get(presented)
        if found is None:
            return None
        for h in found.key_hashes:
            if hmac.compare_digest(h, presented):
                return found
        return None

    def __len__(self) -> int:
        return len(self._by_hash)
