"""What `lorafleet up` writes to its state folder while it runs (state_files names them).

`up.json` (pid, phase, URLs, processes) is what `lorafleet status` and `lorafleet usage` read;
`replicas.json` tells the gateway and the control API where the replicas are; `control-token`
holds this run's admin token (0600).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lorafleet_core.storage.manifests import atomic_write
from lorafleet_standalone import processes
from lorafleet_standalone.merged import replicas_file_doc, up_replica_row, up_rows
from lorafleet_standalone.state_files import (
    CONTROL_TOKEN_FILE,
    REPLICAS_FILE,
    UP_STATUS_FILE,
)

if TYPE_CHECKING:
    from lorafleet_standalone.merged import MergedRun
    from lorafleet_standalone.processes import ReplicaPlan
    from lorafleet_standalone.supervisor import Supervisor
    from lorafleet_standalone.up_options import UpOptions


def write_up_status(
    opts: UpOptions,
    replicas: list[ReplicaPlan],
    sup: Supervisor,
    phase: str,
    merged: list[MergedRun],
) -> None:
    """`up.json`: this run's pid and phase, its URLs, replicas, merged pools and processes."""
    doc: dict[str, Any] = {
        "pid": os.getpid(),
        "phase": phase,
        "manifests": str(opts.manifests_dir.resolve()),
        "gateway": {
            "url": f"http://{processes.LOOPBACK}:{opts.port}",
            "internalUrl": f"http://{processes.LOOPBACK}:{opts.internal_port}",
        },
        "replicas": [up_replica_row(r) for r in replicas],
        "mergedPools": up_rows(merged),
        "processes": {
            c.spec.name: {
                "pid": c.proc.pid,
                "running": c.proc.poll() is None,
                "restarts": c.restarts,
                "failed": c.failed,
            }
            for c in sup.children
        },
        "updatedAt": time.time(),
    }
    atomic_write(opts.state_dir / UP_STATUS_FILE, json.dumps(doc, indent=2) + "\n")


def write_replicas_file(
    state_dir: Path, replicas: list[ReplicaPlan], merged: list[MergedRun]
) -> None:
    """`replicas.json`: where the shared and the merged pools' replicas listen."""
    doc = replicas_file_doc(replicas, merged)
    atomic_write(state_dir / REPLICAS_FILE, json.dumps(doc, indent=2) + "\n")


def write_control_token(state_dir: Path) -> str:
    """A fresh admin token for this run in `<state>/control-token` (0600); returns its sha256."""
    token = secrets.token_urlsafe(32)
    path = state_dir / CONTROL_TOKEN_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return hashlib.sha256(token.encode()).hexdigest()
