"""Alias deploy history kept beside a standalone manifests folder.

On a cluster the operator records an alias's `status` (adapter, previousAdapter, history). A
manifests folder holds only what a user would `kubectl apply`, so standalone mode keeps the
same status objects in `<folder>/.lorafleet/alias-status.json`; `kubectl apply -f <folder>`
ignores the hidden subfolder. Both the CLI (after `alias set`) and the standalone reconciler
(after a hand edit) advance it with `advance`, which is idempotent, so whichever sees a change
first records it once.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from lorafleet_cli.manifests import atomic_write
from lorafleet_core.models import AdapterAliasStatus, AliasHistoryEntry
from lorafleet_core.standalone_paths import ALIAS_STATUS_FILE as ALIAS_STATUS_FILE
from lorafleet_core.standalone_paths import STATUS_DIR as STATUS_DIR
from lorafleet_core.standalone_paths import alias_status_path

HISTORY_MAX = 10


def advance(
    status: AdapterAliasStatus | None, adapter: str, now: datetime | None = None
) -> AdapterAliasStatus:
    """Status after the alias's spec.adapter is observed as `adapter` (no-op when unchanged)."""
    current = status.model_copy(deep=True) if status else AdapterAliasStatus()
    if current.adapter == adapter:
        return current
    when = now or datetime.now(UTC)
    current.previous_adapter = current.adapter
    current.adapter = adapter
    current.updated_at = when
    current.history = [AliasHistoryEntry(adapter=adapter, at=when), *current.history][:HISTORY_MAX]
    return current


def status_path(folder: Path) -> Path:
    return alias_status_path(folder)


def load_all(folder: Path) -> dict[str, AdapterAliasStatus]:
    path = status_path(folder)
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text() or "{}")
    return {name: AdapterAliasStatus.model_validate(v) for name, v in raw.items()}


def save_all(folder: Path, statuses: dict[str, AdapterAliasStatus]) -> None:
    body = {name: s.wire() for name, s in sorted(statuses.items())}
    atomic_write(status_path(folder), json.dumps(body, indent=2) + "\n")


def record(folder: Path, name: str, adapter: str) -> AdapterAliasStatus:
    """Advance one alias's stored status to `adapter` and save it."""
    statuses = load_all(folder)
    new = advance(statuses.get(name), adapter)
    if statuses.get(name) != new:
        statuses[name] = new
        save_all(folder, statuses)
    return new
