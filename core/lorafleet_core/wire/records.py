"""The registry record of one adapter: everything a replica needs to fetch and verify it.

A replica only ever loads an adapter whose record it holds. Records come from the registry
(LoRAAdapter objects) along two paths, never from a client request:

- pre-warm: the operator writes the records a pod owns into the pod annotation
  `lorafleet.dev/owned-adapters`; the downward API projects it into a file the agent watches;
- on demand: the gateway (which watches LoRAAdapter objects) posts the record to the agent's
  internal load endpoint before routing a request for an adapter the replica does not hold.

Annotation format: a JSON array of compact records (keys below), sorted by id, so the same set
always produces the same bytes and the operator can skip no-op patches.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field

from lorafleet_core.api.models import DNS_SUBDOMAIN, SHA256_REF, WEIGHTS_URI, LoRAAdapterSpec

MAX_ADAPTER_ID = 253
_ADAPTER_ID = re.compile(DNS_SUBDOMAIN)


def is_adapter_id(value: str) -> bool:
    """Whether `value` can name an adapter (a LoRAAdapter's name: a DNS subdomain). An id taken
    from a URL is checked with this before it names anything on disk (`..` never does)."""
    return len(value) <= MAX_ADAPTER_ID and _ADAPTER_ID.fullmatch(value) is not None


class AdapterRecord(BaseModel):
    """One adapter version as the data plane sees it; `id` is the LoRAAdapter's name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=DNS_SUBDOMAIN, max_length=MAX_ADAPTER_ID)
    tenant: str
    base_model_hash: str = Field(pattern=SHA256_REF)
    rank: int = Field(ge=1, le=256)
    alpha: float = Field(gt=0)
    target_modules: tuple[str, ...]
    weights_uri: str = Field(pattern=WEIGHTS_URI)
    checksum: str = Field(pattern=SHA256_REF)
    size_bytes: int | None = None

    @classmethod
    def from_spec(cls, name: str, spec: LoRAAdapterSpec) -> AdapterRecord:
        return cls(
            id=name,
            tenant=spec.tenant,
            base_model_hash=spec.base_model_hash,
            rank=spec.rank,
            alpha=spec.alpha,
            target_modules=tuple(spec.target_modules),
            weights_uri=spec.weights_uri,
            checksum=spec.checksum,
            size_bytes=spec.size_bytes,
        )


# Records are frozen (hashable); the pre-warm planner re-encodes every adapter's row on each
# pass, and the rows of unchanged records are the same bytes: half the planner's time was here.
@lru_cache(maxsize=65_536)
def encode_owned_row(record: AdapterRecord) -> str:
    """One record as it appears in the owned-adapters annotation: compact JSON, sorted keys."""
    return json.dumps(
        record.model_dump(mode="json", exclude_none=True), separators=(",", ":"), sort_keys=True
    )


def join_owned_rows(rows: Iterable[str]) -> str:
    """The annotation value from rows of `encode_owned_row`, in the order given.

    The pre-warm planner sizes an annotation row by row (it must fit the annotation limit), so
    the encoding is split in two; `encode_owned` is the whole of it.
    """
    return "[" + ",".join(rows) + "]"


def encode_owned(records: Iterable[AdapterRecord]) -> str:
    """Annotation value for a set of records: deterministic compact JSON, sorted by id."""
    return join_owned_rows(encode_owned_row(r) for r in sorted(records, key=lambda r: r.id))


def decode_owned(value: str) -> list[AdapterRecord]:
    """Parse an annotation value written by `encode_owned`; raises ValueError when malformed."""
    if not value.strip():
        return []
    data = json.loads(value)
    if not isinstance(data, list):
        raise ValueError("owned-adapters annotation must be a JSON array")
    return [AdapterRecord.model_validate(row) for row in data]


def owned_ids(value: str | None) -> list[str]:
    """The ids an annotation value lists, in its order, without validating each record: the
    operator reads its own earlier write back as the kept set's memory (planning.prewarm), the
    simulator its agents' lists. A value that does not parse lists nothing (the next plan
    overwrites it)."""
    if not value or not value.strip():
        return []
    try:
        data = json.loads(value)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [row["id"] for row in data if isinstance(row, dict) and isinstance(row.get("id"), str)]


def parse_downward_annotations(text: str) -> dict[str, str]:
    """Parse a downward-API annotations file: one `key="value"` per line, value Go-quoted.

    Kubernetes writes values with Go's strconv.Quote, whose escapes are a subset of JSON's for
    the printable text we store, so json.loads reads each value.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        out[key.strip()] = json.loads(raw.strip())
    return out


def format_downward_annotations(annotations: dict[str, str]) -> str:
    """Inverse of `parse_downward_annotations` (used by standalone mode and tests)."""
    return "".join(f"{k}={json.dumps(v)}\n" for k, v in sorted(annotations.items()))
