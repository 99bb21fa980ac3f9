"""What standalone mode keeps beside a manifests folder in place of `status` on a cluster.

A manifests folder holds only what a user would `kubectl apply -f`; what the operator would
write as `status` on a cluster lives in a hidden subfolder, which `kubectl apply -f <folder>`
(not recursive) and `lorafleet_core.storage.manifests` never read as manifests.

One writer, as on a cluster: the standalone reconciler (`lorafleet_standalone.reconciler`)
saves the alias statuses its planner (`lorafleet_core.planning.aliases.plan_alias`) computed.
Readers: the gateway's folder catalog (serves each alias's `status.adapter`) and
`lorafleet alias rollback` (reads `status.previousAdapter`). The CLI never writes it.

The adapters' verdicts (phase, and the checksum they are about) likewise, from the same
reconciler: the folder's writers (`lorafleet alias set`, the control API's folder store) read
them as the LoRAAdapter's `status.phase`, so a deploy of a version the replicas refused
(Failed) is refused up front, as on a cluster.

Merged pools' `status.merge` likewise: `lorafleet up`'s merge step
(`lorafleet_standalone.runner`, after `merged.merge_locally`) is its one writer, once per
run (the whole file, so a pool whose merge did not run this time is not Ready); the gateway's
folder catalog reads it as the pool's `status.merge` (a merged pool serves once Ready).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from lorafleet_core.api.models import AdapterAliasStatus, AdapterPhase, MergeStatus
from lorafleet_core.storage.manifests import atomic_write

M = TypeVar("M", bound=BaseModel)

STATUS_DIR = ".lorafleet"
# JSON object: alias name -> AdapterAliasStatus in its wire form (camelCase).
ALIAS_STATUS_FILE = "alias-status.json"
# JSON object: adapter name -> AdapterVerdict.
ADAPTER_STATUS_FILE = "adapter-status.json"
# JSON object: merged pool name -> MergeStatus in its wire form.
MERGE_STATUS_FILE = "merge-status.json"


class AdapterVerdict(BaseModel):
    """An adapter's phase as the reconciler last planned it, for the spec with `checksum`
    (a manifest removed and written again with other weights is not judged by the old one)."""

    model_config = ConfigDict(extra="ignore")

    phase: AdapterPhase | None = None
    checksum: str


def adapter_status_path(folder: Path) -> Path:
    return folder / STATUS_DIR / ADAPTER_STATUS_FILE


def load_adapter_verdicts(folder: Path) -> dict[str, AdapterVerdict]:
    """Adapter name -> its last verdict; {} when none. Raises ValueError for an unreadable file."""
    return _load(adapter_status_path(folder), AdapterVerdict)


def save_adapter_verdicts(folder: Path, verdicts: Mapping[str, AdapterVerdict]) -> None:
    """Replace the stored verdicts (the reconciler's write; atomic)."""
    body = {name: v.model_dump(mode="json") for name, v in sorted(verdicts.items())}
    atomic_write(adapter_status_path(folder), json.dumps(body, indent=2) + "\n")


def with_adapter_verdict(body: dict[str, Any], folder: Path) -> dict[str, Any]:
    """A LoRAAdapter manifest with its stored verdict as `status.phase` when the verdict is
    about this spec (same checksum); the manifest unchanged otherwise, or when the file is
    unreadable (the reconciler rewrites it on its next pass)."""
    name = str((body.get("metadata") or {}).get("name", ""))
    try:
        verdict = load_adapter_verdicts(folder).get(name)
    except ValueError:
        return body
    if verdict is None or verdict.checksum != (body.get("spec") or {}).get("checksum"):
        return body
    return {**body, "status": {"phase": verdict.model_dump(mode="json")["phase"]}}


def with_alias_status(body: dict[str, Any], folder: Path) -> dict[str, Any]:
    """An AdapterAlias manifest with the reconciler's stored status (what it serves, the deploy
    in progress, the conditions), as a cluster's object carries it; the manifest unchanged
    when there is none yet or the file is unreadable."""
    name = str((body.get("metadata") or {}).get("name", ""))
    try:
        status = load_alias_statuses(folder).get(name)
    except ValueError:
        return body
    return body if status is None else {**body, "status": status.wire()}


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
