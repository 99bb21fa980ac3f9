"""The registry records one agent holds: the policy check at admission, merged mode's single
adapter, and the refusal of a second, different record under an id it holds (a mixin of
`AdapterManager`, lorafleet_agent.manager)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from lorafleet_agent.merged_model import MergedModel
from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.verifier import PoolPolicy, VerificationError, check_record
from lorafleet_core.api import reasons
from lorafleet_core.wire.records import AdapterRecord

log = logging.getLogger(__name__)


class RecordConflict(ValueError):
    """A different record arrived under an id the agent already holds (ids are immutable)."""


class HeldRecords:
    """Records by adapter id, and why each refused one was refused (set in AdapterManager)."""

    policy: PoolPolicy
    merged: MergedModel | None
    metrics: AgentMetrics
    records: dict[str, AdapterRecord]
    failed: dict[str, str]
    # Told of every refused conflicting record (on a cluster: a Kubernetes Event).
    on_conflict: Callable[[AdapterRecord, AdapterRecord], None] | None

    def is_merged(self, adapter_id: str) -> bool:
        return self.merged is not None and adapter_id == self.merged.adapter_id

    def admits(self, adapter_id: str) -> bool:
        """Whether a request for the adapter may be served here (a held record or merged)."""
        return adapter_id in self.records or self.is_merged(adapter_id)

    def add_record(self, record: AdapterRecord) -> None:
        """Hold a registry record (pre-warm or load call); refuses a policy violation at once."""
        if self.merged is not None and not self.is_merged(record.id):
            self._fail(
                record.id,
                VerificationError(
                    reasons.MERGED_POOL,
                    f"this replica serves only adapter {self.merged.adapter_id} merged into "
                    "its weights; LoRA is disabled here",
                ),
            )
            raise VerificationError(reasons.MERGED_POOL, self.failed[record.id])
        held = self.records.get(record.id)
        if held is not None and held != record:
            # Ids are immutable and records come only from the registry's authority: a second,
            # different record means the registry or a caller is wrong. Never swap weights.
            self.metrics.record_conflicts.inc()
            log.error(
                "refused a second, different record for adapter %s (held checksum %s, "
                "offered %s); the held record stays, neither is served",
                record.id,
                held.checksum,
                record.checksum,
            )
            if self.on_conflict is not None:
                self.on_conflict(held, record)
            message = f"adapter id {record.id} is immutable; this replica holds a different record"
            # Fail closed (a LoRAAdapter recreated under its name with other weights gives
            # this; vLLM cannot swap weights under a name): neither is served, /state lists it,
            # until a load call brings the held record again or the agent restarts.
            self._fail(
                record.id,
                VerificationError(
                    reasons.RECORD_CONFLICT,
                    f"{message} and serves neither (recreated with other weights?); publish "
                    "other weights under a new LoRAAdapter name",
                ),
            )
            raise RecordConflict(message)
        try:
            check_record(record, self.policy)
        except VerificationError as exc:
            self._fail(record.id, exc)
            raise
        self.records[record.id] = record

    def _fail(self, adapter_id: str, exc: VerificationError) -> None:
        self.failed[adapter_id] = f"{exc.reason}: {exc}"
        self.metrics.rejections.labels(exc.reason).inc()
        log.warning("adapter %s refused: %s", adapter_id, exc)
