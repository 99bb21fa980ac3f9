"""Expected canary markers per alias: from `--markers alias=MARKER` or from a manifests folder.

In demo mode every canary adapter answers a fixed marker (`ZEBRA-7`, ...), so an answer proves
which adapter served it. From manifests: alias -> the adapter it serves (its status in
`.lorafleet/alias-status.json` when `lorafleet up` reconciles the folder, else `spec.adapter`)
-> that LoRAAdapter's `lorafleet.dev/canary-marker` annotation, else its
`lorafleet.dev/adapter-name` label looked up in the demo's markers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lorafleet_cli.demo_assets import DEFAULT_MARKERS

MARKER_ANNOTATION = "lorafleet.dev/canary-marker"
NAME_LABEL = "lorafleet.dev/adapter-name"


def parse_marker_args(items: list[str]) -> dict[str, str]:
    """`["demo/zebra:prod=ZEBRA-7", ...]` -> {alias: marker}; the alias may contain ':'."""
    out: dict[str, str] = {}
    for item in items:
        alias, sep, marker = item.rpartition("=")
        if not sep or not alias or not marker:
            raise ValueError(f"--markers wants alias=MARKER, got {item!r}")
        out[alias] = marker
    return out


def _documents(folder: Path) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(folder.iterdir()):
        if path.suffix not in (".yaml", ".yml", ".json") or path.name.startswith("."):
            continue
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError):
            continue  # the gateway skips unreadable files too
        for doc in loaded:
            if isinstance(doc, dict) and doc.get("kind") == "List":
                docs.extend(d for d in doc.get("items") or [] if isinstance(d, dict))
            elif isinstance(doc, dict):
                docs.append(doc)
    return docs


def alias_targets(folder: Path) -> dict[str, str]:
    """{public model: adapter id it serves} for every AdapterAlias in `folder`."""
    status_file = folder / ".lorafleet" / "alias-status.json"
    statuses: dict[str, Any] = {}
    if status_file.is_file():
        try:
            statuses = json.loads(status_file.read_text())
        except (OSError, ValueError):
            statuses = {}
    out: dict[str, str] = {}
    for doc in _documents(folder):
        if doc.get("kind") != "AdapterAlias":
            continue
        spec = doc.get("spec") or {}
        name = (doc.get("metadata") or {}).get("name", "")
        served = (statuses.get(name) or {}).get("adapter") if isinstance(statuses, dict) else None
        if spec.get("model") and (served or spec.get("adapter")):
            out[str(spec["model"])] = str(served or spec["adapter"])
    return out


def adapter_markers(folder: Path, known: dict[str, str] | None = None) -> dict[str, str]:
    """{adapter id: marker} for LoRAAdapters whose marker can be told."""
    known = DEFAULT_MARKERS if known is None else known
    out: dict[str, str] = {}
    for doc in _documents(folder):
        if doc.get("kind") != "LoRAAdapter":
            continue
        meta = doc.get("metadata") or {}
        marker = (meta.get("annotations") or {}).get(MARKER_ANNOTATION)
        marker = marker or known.get((meta.get("labels") or {}).get(NAME_LABEL, ""))
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
