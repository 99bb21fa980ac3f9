"""Names shared by every component: API group, kinds, label and annotation keys.

Keeping them in one module means a rename is one edit and a typo is an import error. HTTP
headers belong to the wire protocol (lorafleet_core.wire.headers).
"""

import hashlib
from typing import Final

GROUP: Final = "lorafleet.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
CATEGORY: Final = "lorafleet"

KIND_ADAPTER: Final = "LoRAAdapter"
KIND_ALIAS: Final = "AdapterAlias"
KIND_POOL: Final = "ReplicaPool"

PLURAL_ADAPTER: Final = "loraadapters"
PLURAL_ALIAS: Final = "adapteraliases"
PLURAL_POOL: Final = "replicapools"

# Labels the operator puts on what it creates, so watches can select them.
LABEL_POOL: Final = f"{GROUP}/pool"
LABEL_COMPONENT: Final = f"{GROUP}/component"
LABEL_TENANT: Final = f"{GROUP}/tenant"
# On a LoRAAdapter: its name, the middle of the public models that serve it (tenant/NAME:tag).
# `lorafleet canary` and `kubectl get -l` find an adapter's versions by it.
LABEL_ADAPTER_NAME: Final = f"{GROUP}/adapter-name"
# On a merged ReplicaPool the operator created (autoMerge): the shared pool it came from and
# the adapter it serves.
LABEL_MERGED_FROM: Final = f"{GROUP}/merged-from"
LABEL_MERGED_ADAPTER: Final = f"{GROUP}/merged-adapter"


def label_value(name: str) -> str:
    """`name` as a label value (at most 63 characters): itself when it fits, else its first 54
    characters and 8 hex of a hash of the whole. Object names may be 253 long (an adapter's
    name in the merged-adapter label); Kubernetes refuses the object whose label is longer."""
    if len(name) <= 63:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return f"{name[:54].rstrip('-.')}-{digest}"


# What the operator creates carries app.kubernetes.io/managed-by: lorafleet-operator; with the
# merged-from label and the adapter's controller reference it marks a merged pool the
# operator may scale and delete (never one a person created).
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGED_BY_OPERATOR: Final = "lorafleet-operator"
# On such a merged pool once its adapter's traffic has stayed low for the cool-down: when it
# started draining (RFC 3339). Gateways stop routing to it; the operator deletes it after
# spec.autoMerge.drainSeconds.
ANNOTATION_DRAINING_SINCE: Final = f"{GROUP}/draining-since"

# Written by the operator on each replica pod; projected into the pod by the downward API
# and read by the agent to pre-warm what the pod owns (see lorafleet_core.wire.records).
ANNOTATION_OWNED_ADAPTERS: Final = f"{GROUP}/owned-adapters"

FINALIZER: Final = f"{GROUP}/finalizer"

# Secret holding tenants' API key hashes and rate limits (never plaintext keys).
API_KEYS_SECRET_LABEL: Final = f"{GROUP}/api-keys"
