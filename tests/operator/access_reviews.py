"""SubjectAccessReview for the emulated API server: kube-apiserver's RBAC authorizer in small.

kmock serves stored objects; a SubjectAccessReview is not one (the server answers it and stores
nothing), so, as for TokenReview, a handler answers it. It decides as RBAC does: a request is
allowed when a binding of the user, or of one of the groups the review names, holds a rule
matching its verb, API group and resource (`*` matches any); a RoleBinding covers requests in
its namespace only, so a cluster-scoped resource (no namespace in the attributes) needs a
ClusterRoleBinding. It refuses, as the API server does with 422, a review naming neither user
nor group, or not exactly one of resourceAttributes and nonResourceAttributes. The operator's
use of the answer is the code under test; this is only the API server's part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kmock

from tests.operator.kmock_cluster import Cluster

PATH = "post /apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Rule:
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def allows(self, group: str, resource: str, verb: str) -> bool:
        return (
            (group in self.groups or "*" in self.groups)
            and (resource in self.resources or "*" in self.resources)
            and (verb in self.verbs or "*" in self.verbs)
        )


@dataclass(frozen=True)
class Binding:
    """A RoleBinding (`namespace` set) or ClusterRoleBinding (None) of `subject` to `rules`.

    `subject` is what RBAC compares: `system:serviceaccount:ns:name` for a ServiceAccount, or
    a group name (`system:serviceaccounts:ns`)."""

    name: str
    subject: str
    rules: tuple[Rule, ...]
    namespace: str | None = None


@dataclass
class SubjectAccessReviews:
    """The handler, its bindings (a test adds and removes them) and the reviews it answered."""

    bindings: list[Binding] = field(default_factory=list)
    asked: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: Any) -> Any:
        body = request.data or {}
        spec = body.get("spec") or {}
        user, groups = spec.get("user") or "", list(spec.get("groups") or [])
        res, nonres = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        problems = []
        if not user and not groups:
            problems.append(
                'spec.user: Invalid value: "": at least one of user or group must be specified'
            )
        if (res is None) == (nonres is None):
            problems.append(
                'spec.resourceAttributes: Invalid value: "null": exactly one of '
                "nonResourceAttributes or resourceAttributes must be specified"
            )
        if problems:
            return kmock.Response(status=422, payload=_invalid(problems))
        self.asked.append(spec)
        status: dict[str, Any] = {"allowed": False}
        if res is not None:
            hit = self._match(user, groups, res)
            if hit is not None:
                kind = "RoleBinding" if hit.namespace else "ClusterRoleBinding"
                where = f"{hit.namespace}/" if hit.namespace else ""
                status = {"allowed": True, "reason": f'RBAC: allowed by {kind} "{where}{hit.name}"'}
        return {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def _match(self, user: str, groups: list[str], res: dict[str, Any]) -> Binding | None:
        namespace = res.get("namespace") or None
        group, resource, verb = res.get("group") or "", res.get("resource") or "", res.get("verb")
        for b in self.bindings:
            if b.subject != user and b.subject not in groups:
                continue
            if b.namespace is not None and b.namespace != namespace:
                continue
            if any(r.allows(group, resource, str(verb)) for r in b.rules):
                return b
        return None

    def count(self, user: str) -> int:
        return sum(1 for spec in self.asked if spec.get("user") == user)


def _invalid(problems: list[str]) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": 'SubjectAccessReview.authorization.k8s.io "" is invalid: ' + ", ".join(problems),
        "reason": "Invalid",
        "code": 422,
    }


def serve(cluster: Cluster) -> SubjectAccessReviews:
    """Answer `cluster`'s SubjectAccessReviews; the returned handler holds its bindings."""
    reviews = SubjectAccessReviews()
    cluster.emulator[PATH] << reviews
    return reviews


# The chart's agent permissions (charts/lorafleet/templates/agent-rbac.yaml).
TOKEN_REVIEWS = Rule(("authentication.k8s.io",), ("tokenreviews",), ("create",))
EVENTS = Rule(("",), ("events",), ("create", "patch", "get"))
