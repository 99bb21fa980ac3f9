"""The gateway pool's inside Secret (settings.internal_secret): created when it is missing.

The chart renders no Secret (renders stay deterministic for Argo CD); the operator creates
`<gateway.pool>-internal` with new tokens. It has `create` on Secrets, never `get` or `watch`
(it never reads their tokens), so "missing" is a create that does not conflict. It tries on the
pool's reconcile and then, from the pool's loop, once every `internal_secret_recheck_seconds`:
a Secret someone deleted comes back within that time, without an operator restart.
"""

from __future__ import annotations

import secrets
import time

import kopf

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.kube.client import is_conflict
from lorafleet_core.planning.replica_config import (
    internal_secret_name,
    plan_shared_internal_secret,
)
from lorafleet_operator.kube import HOLDER
from lorafleet_operator.runtime import runtime


async def ensure_gateway_secret(pool: ReplicaPool, body: kopf.Body, namespace: str) -> None:
    """Create the gateway pool's Secret unless it exists (a conflict says it does, and its
    tokens are kept); at most once per recheck interval. Other pools: nothing."""
    rt = runtime()
    name = rt.settings.internal_secret
    if name is None or name != internal_secret_name(pool.metadata.name):
        return
    key, now = (namespace, name), time.monotonic()
    last = rt.secret_checked.get(key)
    if last is not None and now - last < rt.settings.internal_secret_recheck_seconds:
        return
    rt.secret_checked[key] = now  # before the call: the pool's reconcile and loop may overlap
    kube = await HOLDER.client()
    tokens = (secrets.token_urlsafe(36) for _ in range(3))
    try:
        await kube.create_secret(namespace, plan_shared_internal_secret(name, *tokens))
    except Exception as exc:
        if not is_conflict(exc):
            rt.secret_checked.pop(key, None)  # not known to exist: the next tick tries again
            raise
        return
    message = f"Secret {name} created with new tokens (the gateway and operator read it as files)"
    kopf.event(body, type="Normal", reason=reasons.INTERNAL_SECRET_CREATED, message=message)
