"""The files in a `lorafleet up` state folder: their names, shared by the writer (up_status,
reconciler) and the readers (`lorafleet status`, `lorafleet usage`), and how a reader opens
one.

Names and readers only: the read-only commands import this without the planners the writers
need.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

UP_STATUS_FILE = "up.json"
RECONCILE_STATUS_FILE = "reconcile.json"
REPLICAS_FILE = "replicas.json"
CONTROL_TOKEN_FILE = "control-token"  # noqa: S105 (a file name)


class StateFileError(ValueError):
    """A `lorafleet up` state file that cannot be read (cut off, edited by hand)."""


def read_state_json(path: Path) -> dict[str, Any]:
    """A `lorafleet up` state file as a JSON object; StateFileError when it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StateFileError(f"{path} is unreadable ({exc}); restart `lorafleet up`") from exc
    if not isinstance(doc, dict):
        raise StateFileError(f"{path} is not a JSON object; restart `lorafleet up`")
    return doc


def up_alive(up: Mapping[str, Any]) -> bool:
    """Whether the `lorafleet up` that wrote up.json still runs: one that was SIGKILLed (or
    whose machine rebooted) never wrote `stopped`, and its children died with it."""
    import psutil

    pid = up.get("pid")
    if not isinstance(pid, int):
        return True  # nothing to check against
    return bool(psutil.pid_exists(pid))
