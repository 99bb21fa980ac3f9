"""Expected canary markers per alias: from `--markers` or from a manifests folder.

In demo mode every canary adapter answers a fixed marker (`ZEBRA-7`, ...), so an answer proves
which adapter served it. From manifests: alias -> the adapter it serves (its status in
`.lorafleet/alias-status.json` when `lorafleet up` reconciles the folder, else `spec.adapter`)
-> that LoRAAdapter's `lorafleet.dev/canary-marker` annotation, else its
`lorafleet.dev/adapter-name` label looked up in the demo's markers. With a weighted split in
force (the stored status's `split`), `version_markers_from_manifests` gives every version in
force its own marker: the canary checks each answer against the version that served it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from lorafleet_core.api import names
from lorafleet_core.api.models.common import DNS_SUBDOMAIN
from lorafleet_core.storage.manifests import load_folder
from lorafleet_demo.assets import DEFAULT_MARKERS

MARKER_ANNOTATION = "lorafleet.dev/canary-marker"
NAME_LABEL = names.LABEL_ADAPTER_NAME


def parse_marker_args(items: list[str]) -> dict[str, str]:
    """`["demo/zebra:prod=ZEBRA-7", ...]` -> {alias: marker}; the alias may contain ':'."""
    out: dict[str, str] = {}
    for item in items:
        alias, sep, marker = item.rpartition("=")
        if not sep or not alias or not marker:
            raise ValueError(f"--markers wants alias=MARKER, got {item!r}")
        out[alias] = marker
    return out


def parse_canary_markers(items: list[str]) -> dict[str, str | dict[str, str]]:
    """`["demo/zebra:prod=ZEBRA-7", "acme/bot:prod@acme-bot-v2=ACME-2", ...]` -> {alias: marker}
    for `ALIAS=MARKER` (one marker, whichever version answers), {alias: {version: marker}} for
    `ALIAS@VERSION=MARKER` (the alias's answers must come from a listed version, each with its
    own marker). An alias (tenant/name:tag) holds no '@' or '=', so the split is unambiguous."""
    out: dict[str, str | dict[str, str]] = {}
    for item in items:
        target, sep, marker = item.partition("=")
        if not sep or not target or not marker:
            raise ValueError(f"--markers wants ALIAS=MARKER or ALIAS@VERSION=MARKER, got {item!r}")
        alias, at, version = target.partition("@")
        if not at:
            if isinstance(out.get(alias), dict):
                raise ValueError(f"--markers {item!r}: {alias} already has per-version markers")
            out[alias] = marker
            continue
        if not alias or not re.fullmatch(DNS_SUBDOMAIN, version) or len(version) > 253:
            raise ValueError(
                f"--markers {item!r}: ALIAS@VERSION=MARKER wants an alias and an adapter name "
                "(lower-case letters, digits, '-' and '.') as the version"
            )
        per_version = out.setdefault(alias, {})
        if not isinstance(per_version, dict):
            raise ValueError(f"--markers {item!r}: {alias} already has one marker for any version")
        if per_version.get(version, marker) != marker:
            raise ValueError(f"--markers {item!r}: {alias}@{version} has two markers")
        per_version[version] = marker
    return out


def _dict(value: Any) -> dict[str, Any]:
    """`value` if it is a mapping, else {}: a hand-written manifest may hold anything."""
    return value if isinstance(value, dict) else {}


def _documents(folder: Path) -> list[dict[str, Any]]:
    """The folder's objects as `lorafleet_core.storage.manifests` (the one reader) reads them; a
    file
    that does not parse is skipped, as the gateway and the reconciler skip it."""
    if not folder.is_dir():
        raise ValueError(f"--manifests {folder} is not a folder")
    return [o.body for o in load_folder(folder).objects]


def _statuses(folder: Path) -> dict[str, dict[str, Any]]:
    """Alias name -> its stored status (standalone's alias-status.json), {} when unreadable."""
    path = folder / ".lorafleet" / "alias-status.json"
    try:
        raw = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}  # unreadable: fall back to spec.adapter
    return {str(k): _dict(v) for k, v in _dict(raw).items()}


def _served(folder: Path) -> dict[str, Any]:
    """Alias name -> the adapter its stored status serves."""
    return {k: v.get("adapter") for k, v in _statuses(folder).items()}


def alias_versions(folder: Path) -> dict[str, list[str]]:
    """{public model: the versions in force, primary first} for every AdapterAlias in `folder`.

    The versions are the stored status's adapter and its `split` (what the gateway routes by);
    without a stored status, spec.adapter alone: a spec.split nobody has put in force is not
    served, so an answer from one of its versions is a failure."""
    statuses = _statuses(folder)
    out: dict[str, list[str]] = {}
    for doc in _documents(folder):
        if doc.get("kind") != "AdapterAlias":
            continue
        status = statuses.get(str(_dict(doc.get("metadata")).get("name", "")))
        spec = _dict(doc.get("spec"))
        primary = (status or {}).get("adapter") or spec.get("adapter")
        if not isinstance(spec.get("model"), str) or not isinstance(primary, str) or not primary:
            continue
        split = (status or {}).get("split")
        versions = [primary]
        for entry in split if isinstance(split, list) else []:
            name = _dict(entry).get("adapter")
            if isinstance(name, str) and name and name not in versions:
                versions.append(name)
        out[spec["model"]] = versions
    return out


def alias_targets(folder: Path) -> dict[str, str]:
    """{public model: adapter id it serves} for every AdapterAlias in `folder`."""
    served_by = _served(folder)
    out: dict[str, str] = {}
    for doc in _documents(folder):
        if doc.get("kind") != "AdapterAlias":
            continue
        spec = _dict(doc.get("spec"))
        served = served_by.get(str(_dict(doc.get("metadata")).get("name", "")))
        target = served or spec.get("adapter")
        if isinstance(spec.get("model"), str) and isinstance(target, str) and target:
            out[spec["model"]] = target
    return out


def adapter_markers(folder: Path, known: dict[str, str] | None = None) -> dict[str, str]:
    """{adapter id: marker} for LoRAAdapters whose marker can be told."""
    known = DEFAULT_MARKERS if known is None else known
    out: dict[str, str] = {}
    for doc in _documents(folder):
        if doc.get("kind") != "LoRAAdapter":
            continue
        meta = _dict(doc.get("metadata"))
        marker = _dict(meta.get("annotations")).get(MARKER_ANNOTATION)
        marker = marker or known.get(str(_dict(meta.get("labels")).get(NAME_LABEL, "")))
        if marker and meta.get("name"):
            out[str(meta["name"])] = str(marker)
    return out


def markers_from_manifests(folder: Path) -> dict[str, str]:
    """{alias: expected marker} for every alias whose served adapter has a known marker."""
    by_adapter = adapter_markers(folder)
    return {
        alias: by_adapter[adapter]
        for alias, adapter in alias_targets(folder).items()
        if adapter in by_adapter
    }


def version_markers_from_manifests(folder: Path) -> dict[str, dict[str, str | None]]:
    """{alias: {version in force: its marker, None when unknown}} for every alias whose primary
    or a version of its split has a known marker."""
    by_adapter = adapter_markers(folder)
    return {
        alias: {v: by_adapter.get(v) for v in versions}
        for alias, versions in alias_versions(folder).items()
        if any(v in by_adapter for v in versions)
    }
