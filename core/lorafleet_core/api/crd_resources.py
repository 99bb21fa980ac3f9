"""What each CRD needs besides its schema: names, printer columns, subresources.

The printer columns follow cert-manager's practice: a Ready column from the Ready condition,
reason and message at `priority: 1` (`kubectl get -o wide`), and status fields (what is) before
spec fields (what was asked for). The API server evaluates each `jsonPath` and shows its first
match, `<none>` when nothing matches; tests/api/test_printer_columns.py evaluates them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from lorafleet_core.api import names
from lorafleet_core.api.models import AdapterAlias, LoRAAdapter, ReplicaPool

Schema = dict[str, Any]


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str = ""
    priority: int = 0

    def manifest(self) -> Schema:
        out: Schema = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            out["description"] = self.description
        if self.priority:
            out["priority"] = self.priority
        return out


@dataclass(frozen=True)
class ResourceKind:
    """What a CRD needs besides the schema: names, columns, subresources."""

    model: type[BaseModel]
    kind: str
    plural: str
    short_names: tuple[str, ...]
    columns: tuple[PrinterColumn, ...]
    scale: Schema | None = None

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{names.GROUP}"

    @property
    def file_name(self) -> str:
        # controller-gen's convention, so tools that glob crds/ find what they expect.
        return f"{names.GROUP}_{self.plural}.yaml"


_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


def _condition_columns(cond: str) -> tuple[PrinterColumn, ...]:
    """cert-manager's practice: the condition's status as a column, its reason and message at
    priority 1 (shown by `kubectl get -o wide`)."""
    where = f'.status.conditions[?(@.type=="{cond}")]'
    return (
        PrinterColumn("Reason", "string", f"{where}.reason", f"Reason of the {cond} condition", 1),
        PrinterColumn(
            "Message", "string", f"{where}.message", f"Message of the {cond} condition", 1
        ),
    )


_READY = PrinterColumn(
    "Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "The Ready condition"
)

RESOURCES: tuple[ResourceKind, ...] = (
    ResourceKind(
        model=LoRAAdapter,
        kind=names.KIND_ADAPTER,
        plural=names.PLURAL_ADAPTER,
        short_names=("lora",),
        columns=(
            _READY,
            PrinterColumn("Tenant", "string", ".spec.tenant"),
            PrinterColumn("Version", "string", ".spec.version"),
            PrinterColumn("Rank", "integer", ".spec.rank"),
            PrinterColumn("Phase", "string", ".status.phase"),
            PrinterColumn(
                "Owners", "integer", ".status.ownerCount", "How many replicas keep it warm"
            ),
            _AGE,
            PrinterColumn(
                "GPU-Hit", "number", ".status.stats.gpuHitRate", "Share of requests on GPU", 1
            ),
            PrinterColumn(
                "Tok/s", "number", ".status.stats.tokensPerSecond", "Tokens/s, last minute", 1
            ),
            *_condition_columns("Ready"),
        ),
    ),
    ResourceKind(
        model=AdapterAlias,
        kind=names.KIND_ALIAS,
        plural=names.PLURAL_ALIAS,
        short_names=("alias",),
        columns=(
            _READY,
            PrinterColumn("Model", "string", ".spec.model"),
            # What serves (status), not what was asked for (spec): they differ while a deploy
            # is refused, and an incident needs the one that serves.
            PrinterColumn("Serving", "string", ".status.adapter", "Adapter served now"),
            # Empty without a split; during a weighted rollout, every version's share.
            PrinterColumn("Split", "string", ".status.traffic", "Traffic split in force"),
            PrinterColumn("Previous", "string", ".status.previousAdapter", "Rollback target"),
            PrinterColumn(
                "Deployed",
                "string",
                '.status.conditions[?(@.type=="Deployed")].status',
                "False while the last deploy (spec.adapter) is refused",
            ),
            _AGE,
            PrinterColumn("Wanted", "string", ".spec.adapter", "Adapter asked for (spec)", 1),
            # The Deployed condition says why a deploy is refused; Ready only says what serves.
            *_condition_columns("Deployed"),
        ),
    ),
    ResourceKind(
        model=ReplicaPool,
        kind=names.KIND_POOL,
        plural=names.PLURAL_POOL,
        short_names=("rpool",),
        columns=(
            _READY,
            PrinterColumn("Base Model", "string", ".spec.baseModel.name"),
            PrinterColumn("Min", "integer", ".spec.replicas.min"),
            PrinterColumn("Max", "integer", ".spec.replicas.max"),
            PrinterColumn("Desired", "integer", ".status.desiredReplicas"),
            PrinterColumn("Replicas", "integer", ".status.replicas"),
            PrinterColumn("Ready Replicas", "integer", ".status.readyReplicas"),
            # Merged pools only (<none> on a shared pool): the merge step's phase.
            PrinterColumn("Merge", "string", ".status.merge.phase", "Merge step (merged pools)"),
            _AGE,
            PrinterColumn(
                "Merged Adapter", "string", ".spec.merged.adapter", "Adapter served merged", 1
            ),
            *_condition_columns("Ready"),
        ),
        scale={
            "specReplicasPath": ".spec.replicas.desired",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    ),
)
