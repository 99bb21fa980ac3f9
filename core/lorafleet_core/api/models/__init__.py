"""Pydantic models of lorafleet's custom resources: the one source of truth.

`crds/*.yaml` is generated from these models (see lorafleet_core.api.crds); a test fails when the
committed YAML drifts. Python attributes are snake_case; the wire format (and the YAML a user
writes) is camelCase, as everywhere in Kubernetes.

Constraints live twice on purpose: as pydantic validation (what the operator, gateway, CLI and
standalone mode enforce) and as OpenAPI/CEL in the CRD (what the API server enforces before any
lorafleet code runs). Cross-field rules are written as CEL in `json_schema_extra` and mirrored by
model validators here.

Split by resource: `common` (patterns, CamelModel, Condition, ObjectMeta), `adapter`, `alias`,
`pool` (with `pool_engine`: base model and vLLM settings, `pool_template`: the replica pods'
template, and `merged`, its merged mode). Import from `lorafleet_core.api.models`; the submodules
are an implementation detail.
"""

from lorafleet_core.api.models.adapter import (
    MAX_OWNERS,
    AdapterPhase,
    AdapterStats,
    LoRAAdapter,
    LoRAAdapterSpec,
    LoRAAdapterStatus,
    Placement,
)
from lorafleet_core.api.models.alias import (
    DEFAULT_PROGRESS_DEADLINE_S,
    AdapterAlias,
    AdapterAliasSpec,
    AdapterAliasStatus,
    AliasDeploy,
    AliasHistoryEntry,
    SplitTarget,
    traffic_summary,
)
from lorafleet_core.api.models.common import (
    ADAPTER_NAME,
    ALIAS_MODEL,
    ALL_TARGET_MODULES,
    CONDITION_MESSAGE_MAX,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MODULE_NAME,
    SHA256_REF,
    WEIGHTS_URI,
    AdapterName,
    CamelModel,
    Condition,
    ConditionStatus,
    ModuleName,
    ObjectMeta,
    ReplicaId,
    first_error,
    immutable,
)
from lorafleet_core.api.models.merged import MergedSpec, MergePhase, MergeStatus
from lorafleet_core.api.models.pool import (
    MAX_POOL_NAME,
    POOL_NAME,
    AutoMergeSpec,
    AutoscalingSpec,
    CacheSpec,
    ReplicaBounds,
    ReplicaPool,
    ReplicaPoolSpec,
    ReplicaPoolStatus,
)
from lorafleet_core.api.models.pool_engine import BaseModelRef, EngineSpec
from lorafleet_core.api.models.pool_template import PodMetadata, ReplicaPodTemplate

AnyResource = LoRAAdapter | AdapterAlias | ReplicaPool

__all__ = [
    "ADAPTER_NAME",
    "ALIAS_MODEL",
    "ALL_TARGET_MODULES",
    "CONDITION_MESSAGE_MAX",
    "DEFAULT_PROGRESS_DEADLINE_S",
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "MAX_OWNERS",
    "MAX_POOL_NAME",
    "MODULE_NAME",
    "POOL_NAME",
    "SHA256_REF",
    "WEIGHTS_URI",
    "AdapterAlias",
    "AdapterAliasSpec",
    "AdapterAliasStatus",
    "AdapterName",
    "AdapterPhase",
    "AdapterStats",
    "AliasDeploy",
    "AliasHistoryEntry",
    "AnyResource",
    "AutoMergeSpec",
    "AutoscalingSpec",
    "BaseModelRef",
    "CacheSpec",
    "CamelModel",
    "Condition",
    "ConditionStatus",
    "EngineSpec",
    "LoRAAdapter",
    "LoRAAdapterSpec",
    "LoRAAdapterStatus",
    "MergePhase",
    "MergeStatus",
    "MergedSpec",
    "ModuleName",
    "ObjectMeta",
    "Placement",
    "PodMetadata",
    "ReplicaBounds",
    "ReplicaId",
    "ReplicaPodTemplate",
    "ReplicaPool",
    "ReplicaPoolSpec",
    "ReplicaPoolStatus",
    "SplitTarget",
    "first_error",
    "immutable",
    "traffic_summary",
]
