"""The emulated API server the agent's cluster features talk to: kmock plus a TokenReview.

kmock serves CRUD (Events, LoRAAdapters) but not TokenReview, which is not a stored resource:
the handler below answers it as kube-apiserver's ServiceAccount authenticator does. A token
issued for other audiences than the ones asked about is `authenticated: false`; `audiences`
in the answer is the intersection. One token belongs to an audience-unaware authenticator
(a webhook that ignores spec.audiences and answers the token's own audiences), so the agent's
own audience check is exercised as well. The agent's verification is the code under test;
this is only the API server's part.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.operator.kmock_cluster import Cluster

NAMESPACE = "lfa"
GATEWAY_SA = f"{NAMESPACE}:lorafleet-gateway"
OPERATOR_SA = f"{NAMESPACE}:lorafleet-operator"
AUDIENCE = "lorafleet-agent"


@dataclass(frozen=True)
class Issued:
    account: str  # namespace:name
    audiences: tuple[str, ...]
    audience_aware: bool = True


TOKENS: dict[str, Issued] = {
    "gateway-token": Issued(GATEWAY_SA, (AUDIENCE,)),
    "operator-token": Issued(OPERATOR_SA, (AUDIENCE,)),
    "gateway-api-token": Issued(GATEWAY_SA, ("https://kubernetes.default.svc",)),
    "stranger-token": Issued(f"{NAMESPACE}:someone-else", (AUDIENCE,)),
    "webhook-token": Issued(GATEWAY_SA, ("some-other-service",), audience_aware=False),
}


@dataclass
class TokenReviews:
    """The handler, and what it was asked (the cache test counts reviews)."""

    asked: list[str] = field(default_factory=list)

    def __call__(self, request: Any) -> dict[str, Any]:
        spec = (request.data or {}).get("spec") or {}
        token = str(spec.get("token") or "")
        self.asked.append(token)
        wanted = tuple(spec.get("audiences") or ())
        issued = TOKENS.get(token)
        status: dict[str, Any] = {"authenticated": False}
        if issued is not None:
            if not issued.audience_aware:
                granted = issued.audiences
            else:
                granted = tuple(a for a in wanted if a in issued.audiences) if wanted else ()
            if granted or not issued.audience_aware or not wanted:
                user = {"username": f"system:serviceaccount:{issued.account}"}
                status = {"authenticated": True, "user": user, "audiences": list(granted)}
            else:
                status = {"authenticated": False, "error": "token audiences are invalid"}
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": spec,
            "status": status,
        }

    def count(self, token: str) -> int:
        return sum(1 for t in self.asked if t == token)


def emulated_cluster() -> Iterator[tuple[Cluster, TokenReviews]]:
    cluster = Cluster(NAMESPACE)
    reviews = TokenReviews()
    cluster.emulator["post /apis/authentication.k8s.io/v1/tokenreviews"] << reviews
    try:
        yield cluster, reviews
    finally:
        cluster.close()
