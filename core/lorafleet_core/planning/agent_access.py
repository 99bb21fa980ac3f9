"""Whether a pool's replicas may ask the API server what their agents ask it (pure).

In `tokenReview` mode an agent verifies every load and unload call with a TokenReview; an agent
whose ServiceAccount may not create one refuses every load with 503, and only its log says why.
The operator asks the API server with a SubjectAccessReview per permission below, for the
account the pool's pods run as, and shows the answer as the pool's AgentPermissions condition
(the runbook's "Agent permissions missing" section says what to do).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import Condition, ConditionStatus, ReplicaPool
from lorafleet_core.planning.conditions import condition
from lorafleet_core.planning.replica_config import InsideAuth

RUNBOOK = "docs/runbook.md#agent-permissions-missing"
CHART_VALUE = "serviceAccount.agent.extraAccounts"


@dataclass(frozen=True)
class Permission:
    """One thing an agent asks the API server, as a SubjectAccessReview names it."""

    verb: str
    group: str
    resource: str
    namespaced: bool
    why: str

    def __str__(self) -> str:
        return f"{self.verb} {self.resource}" + (f".{self.group}" if self.group else "")


TOKEN_REVIEW = Permission(
    "create",
    "authentication.k8s.io",
    "tokenreviews",
    namespaced=False,
    why="its agents verify the gateway's and operator's tokens with it: every load fails "
    "closed with 503 without it",
)
EVENTS = Permission(
    "create",
    "",
    "events",
    namespaced=True,
    why="its agents report record conflicts as Events",
)


def pool_account(pool: ReplicaPool, inside: InsideAuth) -> str:
    """The ServiceAccount the pool's pods run as (planning.replica_pod.template_pod_fields)."""
    return pool.spec.template.service_account_name or inside.service_account or "default"


def needed(inside: InsideAuth) -> tuple[Permission, ...]:
    """What the agents ask the API server in this mode; nothing in `secret` mode (an agent
    posts Events there too, but a missing Event permission loses an Event, not the loads)."""
    if inside.mode != "tokenReview":
        return ()
    return (TOKEN_REVIEW, EVENTS) if inside.service_account else (TOKEN_REVIEW,)


def subject_access_review(namespace: str, account: str, perm: Permission) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `namespace:account` may do `perm`.

    The groups are those the API server gives a ServiceAccount's token, so a binding to
    `system:serviceaccounts:<namespace>` counts as it does for the agent itself.
    """
    attributes: dict[str, Any] = {
        "verb": perm.verb,
        "group": perm.group,
        "resource": perm.resource,
    }
    if perm.namespaced:
        attributes["namespace"] = namespace
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }


@dataclass(frozen=True)
class AccessCheck:
    """The API server's answers for one account: what it may not do, or why it could not say."""

    namespace: str
    account: str
    missing: tuple[Permission, ...] = ()
    error: str | None = None  # the review itself failed (e.g. the operator may not ask)


def access_condition(check: AccessCheck, now: datetime, generation: int | None) -> Condition:
    """The pool's AgentPermissions condition for `check`."""
    who = f"ServiceAccount {check.namespace}/{check.account}"
    if check.error is not None:
        message = (
            f"could not check what {who} may do: {check.error} (the operator needs create on "
            "subjectaccessreviews.authorization.k8s.io; the chart grants it in tokenReview mode)"
        )
        return condition(
            reasons.AGENT_PERMISSIONS,
            ConditionStatus.UNKNOWN,
            reasons.ACCESS_REVIEW_FAILED,
            message,
            now,
            generation,
        )
    if not check.missing:
        message = f"{who} may do what the agents ask of the API server"
        return condition(
            reasons.AGENT_PERMISSIONS, True, reasons.PERMISSIONS_GRANTED, message, now, generation
        )
    lacks = "; ".join(f"{p} ({p.why})" for p in check.missing)
    message = (
        f"{who} may not {lacks}. Fix: add {check.account!r} to the chart value {CHART_VALUE} "
        f"(or bind it to the agents' Role and ClusterRole) and upgrade the release; see {RUNBOOK}"
    )
    return condition(
        reasons.AGENT_PERMISSIONS, False, reasons.MISSING_PERMISSIONS, message, now, generation
    )
