"""The files in a `lorafleet up` state folder, by name: the writer (up_status, reconciler)
and the readers (`lorafleet status`, `lorafleet usage`) share these.

Only names here: the read-only commands import this without the planners the writers need.
"""

from __future__ import annotations

UP_STATUS_FILE = "up.json"
RECONCILE_STATUS_FILE = "reconcile.json"
REPLICAS_FILE = "replicas.json"
CONTROL_TOKEN_FILE = "control-token"  # noqa: S105 (a file name)
