"""Checks an adapter must pass before vLLM sees it (pure functions over files and a record)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lorafleet_core.api import reasons
from lorafleet_core.storage.adapter_files import (
    AdapterFormatError,
    BaseModelDims,
    adapter_checksum,
    check_shapes,
    inspect_adapter,
)
from lorafleet_core.wire.records import AdapterRecord


class VerificationError(ValueError):
    """The adapter is refused; `reason` is a CamelCase word, the message says what is wrong."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class PoolPolicy:
    base_model_hash: str
    max_rank: int
    allowed_target_modules: frozenset[str]
    dims: BaseModelDims | None = None


def check_record(record: AdapterRecord, policy: PoolPolicy) -> None:
    """What the record alone tells: refused before anything is downloaded."""
    if policy.base_model_hash and record.base_model_hash != policy.base_model_hash:
        raise VerificationError(
            reasons.BASE_MODEL_MISMATCH,
            f"adapter {record.id} was trained on base model {record.base_model_hash}, "
            f"this pool serves {policy.base_model_hash}",
        )
    if record.rank > policy.max_rank:
        raise VerificationError(
            reasons.RANK_TOO_HIGH,
            f"adapter {record.id} has rank {record.rank} > pool max {policy.max_rank}",
        )
    bad = sorted(set(record.target_modules) - policy.allowed_target_modules)
    if bad:
        raise VerificationError(
            reasons.TARGET_MODULES_NOT_ALLOWED, f"target modules not allowed: {bad}"
        )


def check_files(folder: Path, record: AdapterRecord, policy: PoolPolicy) -> None:
    """What the downloaded files tell: checksum first, then the declared and actual shapes."""
    got = adapter_checksum(folder)
    if got != record.checksum:
        raise VerificationError(
            reasons.CHECKSUM_MISMATCH,
            f"adapter {record.id}: files hash to {got}, record says {record.checksum}",
        )
    try:
        info = inspect_adapter(folder)
    except AdapterFormatError as exc:
        raise VerificationError(reasons.BAD_FORMAT, str(exc)) from exc
    if info.rank > policy.max_rank:
        raise VerificationError(
            reasons.RANK_TOO_HIGH,
            f"adapter {record.id} files have rank {info.rank} > pool max {policy.max_rank}",
        )
    if info.rank != record.rank:
        raise VerificationError(
            reasons.RANK_MISMATCH, f"files have rank {info.rank}, the record says {record.rank}"
        )
    bad = sorted(set(info.target_modules) - policy.allowed_target_modules)
    if bad:
        raise VerificationError(
            reasons.TARGET_MODULES_NOT_ALLOWED, f"target modules not allowed: {bad}"
        )
    if policy.dims is not None:
        report = check_shapes(info, policy.dims)
        if not report.ok:
            raise VerificationError(reasons.SHAPE_MISMATCH, "; ".join(report.problems[:5]))
