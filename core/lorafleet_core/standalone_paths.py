"""Where standalone mode keeps its state beside a manifests folder (shared by CLI and gateway).

A manifests folder holds only what a user would `kubectl apply -f`; what the operator would
write as `status` on a cluster lives in a hidden subfolder, which `kubectl apply -f <folder>`
(not recursive) and the gateway's folder catalog never read as manifests. The CLI's standalone
reconciler writes the alias statuses there (see `lorafleet_cli.alias_status`); the gateway's
folder catalog serves each alias's `status.adapter` from it, as it does on a cluster.
"""

from __future__ import annotations

from pathlib import Path

STATUS_DIR = ".lorafleet"
# JSON object: alias name -> AdapterAliasStatus in its wire form (camelCase).
ALIAS_STATUS_FILE = "alias-status.json"


def alias_status_path(folder: Path) -> Path:
    return folder / STATUS_DIR / ALIAS_STATUS_FILE
