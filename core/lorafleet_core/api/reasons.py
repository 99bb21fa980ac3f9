"""Every condition type and reason string lorafleet writes: one set, so programs can switch on them.

The operator's planners put these in status conditions; the agent's verifier returns the
validation ones as the `code` of a refusal (422 adapter_rejected) and reports them in
`/state` as the reason an adapter failed, so a reason means the same thing wherever it shows.
"""

from __future__ import annotations

# Condition types.
VALIDATED = "Validated"
PLACED = "Placed"
READY = "Ready"
DELETION_BLOCKED = "DeletionBlocked"
DEPLOYED = "Deployed"
CONFLICT = "Conflict"
# AdapterAlias: the versions of spec.split all take their share (planning.alias_split).
SPLIT = "Split"
SCALING = "Scaling"
MERGED_POOL_RECOMMENDED = "MergedPoolRecommended"
AGENT_PERMISSIONS = "AgentPermissions"

# Validation of an adapter against a pool (planner: Validated condition; agent: refusal code).
VALID = "Valid"
NO_MATCHING_POOL = "NoMatchingPool"
BASE_MODEL_MISMATCH = "BaseModelMismatch"
RANK_TOO_HIGH = "RankTooHigh"
TARGET_MODULES_NOT_ALLOWED = "TargetModulesNotAllowed"
UNSUPPORTED_URI_SCHEME = "UnsupportedUriScheme"
WEIGHTS_OUTSIDE_SOURCES = "WeightsOutsideSources"  # weightsUri not under the pool's sources
NO_ADAPTER_SOURCES = "NoAdapterSources"  # the pool names no adapterSources: it takes no adapter
INVALID_CHECKSUM = "InvalidChecksum"
INVALID_SPEC = "InvalidSpec"
# Only the agent can tell these: they need the files.
CHECKSUM_MISMATCH = "ChecksumMismatch"
RANK_MISMATCH = "RankMismatch"
SHAPE_MISMATCH = "ShapeMismatch"
BAD_FORMAT = "BadFormat"
# A replica holding another record under the adapter's id (ids are immutable): it serves neither.
RECORD_CONFLICT = "RecordConflict"

# LoRAAdapter Placed / Ready.
REJECTED = "Rejected"
NOT_VALIDATED = "NotValidated"
NO_READY_REPLICAS = "NoReadyReplicas"
OWNERS_ASSIGNED = "OwnersAssigned"
REPLICA_REJECTED = "ReplicaRejected"  # every owner refused the files (phase Failed)
SERVABLE = "Servable"
REFERENCED_BY_ALIAS = "ReferencedByAlias"
# A merged ReplicaPool serves the adapter merged into its base weights (spec.merged.adapter).
IN_USE_BY_MERGED_POOL = "InUseByMergedPool"

# LoRAAdapter MergedPoolRecommended (planning.merge_advice).
SUSTAINED_TRAFFIC = "SustainedTrafficExceedsReplica"
MERGED_POOL_CREATED = "MergedPoolCreated"
MERGED_POOL_EXISTS = "MergedPoolExists"
AUTO_MERGE_LIMIT = "AutoMergeLimitReached"
WITHIN_CAPACITY = "WithinReplicaCapacity"
# Events on a merged pool the operator created, and its adapter (planning.merged_lifecycle).
MERGED_POOL_SCALED = "MergedPoolScaled"
MERGED_POOL_DRAINING = "MergedPoolDraining"
MERGED_POOL_DRAIN_CANCELLED = "MergedPoolDrainCancelled"
MERGED_POOL_DELETED = "MergedPoolDeleted"
INTERNAL_SECRET_CREATED = "InternalSecretCreated"  # noqa: S105 (a reason, not a secret)
INTERNAL_SECRET_MISSING = "InternalSecretMissing"  # noqa: S105 (a reason, not a secret)
# Warning Event on a deleted LoRAAdapter (and the pools of the replicas concerned): the deletion
# completed while replicas still held its record (lorafleet_operator.forget).
FORGET_INCOMPLETE = "ForgetIncomplete"
# Event about an installed CRD older than the operator's models (lorafleet_operator.crd_check).
CRD_OUTDATED = "CRDOutdated"

# AdapterAlias Deployed / Ready / Conflict.
ADAPTER_NOT_FOUND = "AdapterNotFound"
TENANT_MISMATCH = "TenantMismatch"
ADAPTER_NOT_READY = "AdapterNotReady"
# The target is Ready but no replica has verified its files yet: the deploy waits, serving
# the previous adapter (planning.aliases).
AWAITING_REPLICAS = "AwaitingReplicas"
# A deploy still waiting (AwaitingReplicas, or its target Pending) past the alias's
# spec.progressDeadlineSeconds: reported stalled, never rolled back (planning.aliases).
PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
ADAPTER_DELETING = "AdapterDeleting"
MODEL_CLAIMED = "ModelClaimed"
NO_CONFLICT = "NoConflict"
SERVING = "Serving"
NOTHING_TO_SERVE = "NothingToServe"
# AdapterAlias Split: every version of spec.split takes its share, or the alias has no split.
SPLIT_IN_FORCE = "SplitInForce"
NO_SPLIT = "NoSplit"

# ReplicaPool Ready / Scaling (the autoscaler's decision reasons are in planning.autoscale).
REPLICAS_READY = "ReplicasReady"
AUTOSCALING_DISABLED = "AutoscalingDisabled"
NO_METRICS = "NoMetrics"

# ReplicaPool AgentPermissions (tokenReview mode; planning.agent_access).
PERMISSIONS_GRANTED = "PermissionsGranted"
MISSING_PERMISSIONS = "MissingPermissions"
ACCESS_REVIEW_FAILED = "AccessReviewFailed"

# ReplicaPool merged mode (Ready condition while the merge is not done; status.merge).
MERGE_PENDING = "MergePending"
MERGING = "Merging"
MERGE_FAILED = "MergeFailed"
MERGED_ADAPTER_NOT_FOUND = "MergedAdapterNotFound"
DRAINING = "Draining"  # Ready=False on a merged pool about to be deleted (no sustained traffic)
# The agent of a merged pool's replica refuses every other adapter (LoRA is disabled there).
MERGED_POOL = "MergedPool"
