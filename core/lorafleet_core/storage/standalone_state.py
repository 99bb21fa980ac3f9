"""What standalone mode keeps beside a manifests folder in place of `status` on a cluster.

A manifests folder holds only what a user would `kubectl apply -f`; what the operator would
write as `status` on a cluster lives in a hidden subfolder, which `kubectl apply -f <folder>`
(not recursive) and `lorafleet_core.storage.manifests` never read as manifests.

One writer, as on a cluster: the standalone reconciler (`lorafleet_standalone.reconciler`)
saves the alias statuses its planner (`lorafleet_core.planning.aliases.plan_alias`) computed.
Readers: the gateway's folder catalog (serves each alias's `status.adapter`) and
`lorafleet alias rollback` (reads `status.previousAdapter`). The CLI never writes it.

Merged pools' `status.merge` likewise: `lorafleet up`'s merge step
(`lorafleet_standalone.runner`, after `merged.merge_locally`) is its one writer, once per
run (the whole file, so a pool whose merge did not run this time is not Ready); the gateway's
folder catalog reads it as the pool's `status.merge` (a merged pool serves once Ready).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from lorafleet_core.api.models import AdapterAliasStatus, MergeStatus
from lorafleet_core.storage.manifests import atomic_write

M = TypeVar("M", bound=BaseModel)

STATUS_DIR = ".lorafleet"
# JSON object: alias name -> AdapterAliasStatus in its wire form (camelCase).
ALIAS_STATUS_FILE = "alias-status.json"
# JSON object: merged pool name -> MergeStatus in its wire form.
MERGE_STATUS_FILE = "merge-status.json"


def alias_status_path(folder: Path) -> Path:
    return folder / STATUS_DIR / ALIAS_STATUS_FILE


def merge_status_path(folder: Path) -> Path:
    return folder / STATUS_DIR / MERGE_STATUS_FILE


def _load(path: Path, model: type[M]) -> dict[str, M]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        raw = json.loads(text or "{}")
        if not isinstance(raw, Mapping):
            raise ValueError("expected a JSON object of name -> status")
        return {str(name): model.model_validate(body) for name, body in raw.items()}
    except ValueError as exc:  # JSONDecodeError and pydantic's ValidationError included
        raise ValueError(f"unreadable status file {path}: {exc}") from exc


def load_alias_statuses(folder: Path) -> dict[str, AdapterAliasStatus]:
    """Alias name -> status kept by the reconciler; {} when there is no file yet.

    Raises ValueError for an unreadable file: a reader then keeps what it had rather than
    fall back to spec.adapter, which may be a target the reconciler refused.
    """
    return _load(alias_status_path(folder), AdapterAliasStatus)


def load_merge_statuses(folder: Path) -> dict[str, MergeStatus]:
    """Merged pool name -> its merge status kept by `lorafleet up`; {} when none.

    Raises ValueError for an unreadable file (a reader keeps what it had).
    """
    return _load(merge_status_path(folder), MergeStatus)


def save_merge_statuses(folder: Path, statuses: Mapping[str, MergeStatus]) -> None:
    """Replace the stored merge statuses (`lorafleet up`'s write; atomic)."""
    body = {name: s.wire() for name, s in sorted(statuses.items())}
    atomic_write(merge_status_path(folder), json.dumps(body, indent=2) + "\n")


def save_alias_statuses(folder: Path, statuses: Mapping[str, AdapterAliasStatus]) -> None:
    """Replace the stored statuses (the reconciler's write; atomic, so readers see all or none)."""
    body = {name: s.wire() for name, s in sorted(statuses.items())}
    atomic_write(alias_status_path(folder), json.dumps(body, indent=2) + "\n")
