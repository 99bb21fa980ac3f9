"""The operator on kmock in tokenReview mode: what a pool's ServiceAccount may do, and the
gateway pool's inside Secret kept in place.

The emulated API server answers SubjectAccessReviews as RBAC does (tests.operator.access_reviews):
each test binds the accounts it needs. The operator is the real one (kopf's runner).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kopf.testing import KopfRunner

from tests.operator import access_reviews
from tests.operator.access_reviews import EVENTS, TOKEN_REVIEWS, Binding, SubjectAccessReviews
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV, cond, make_pool, status
from tests.operator.kopf_harness import operator_running

pytestmark = pytest.mark.timeout(180)

NS = "lfp"
AGENT = "lf-agent"
REVIEW_INTERVAL_S = 2.0
TICK = {"enabled": False, "pollIntervalSeconds": 0.2}
AGENT_ENV = {
    **ENV,
    "LORAFLEET_OPERATOR_REPLICA_INTERNAL_AUTH": "tokenReview",
    "LORAFLEET_OPERATOR_REPLICA_CALLERS": f"{NS}:lf-gateway",
    # With an agents' account the agents post Events too: both permissions are checked.
    "LORAFLEET_OPERATOR_REPLICA_SERVICE_ACCOUNT": AGENT,
    "LORAFLEET_OPERATOR_ACCESS_REVIEW_INTERVAL_SECONDS": str(REVIEW_INTERVAL_S),
    "LORAFLEET_OPERATOR_INTERNAL_SECRET_RECHECK_SECONDS": "0.5",
}


def sa(name: str) -> str:
    return f"system:serviceaccount:{NS}:{name}"


def chart_bindings(account: str) -> list[Binding]:
    """What the chart binds an account in serviceAccount.agent (and extraAccounts) to."""
    return [
        Binding(f"agent-{account}", sa(account), (TOKEN_REVIEWS,)),  # ClusterRoleBinding
        Binding(f"agent-{account}", sa(account), (EVENTS,), namespace=NS),  # RoleBinding
    ]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster(NS)
    yield c
    c.close()


@pytest.fixture(scope="module")
def reviews(cluster: Cluster) -> SubjectAccessReviews:
    served = access_reviews.serve(cluster)
    served.bindings += chart_bindings(AGENT)
    return served


@pytest.fixture(scope="module")
def operator(cluster: Cluster, reviews: SubjectAccessReviews) -> Iterator[KopfRunner]:
    with operator_running(cluster, AGENT_ENV) as runner:
        yield runner


def events(cluster: Cluster, pool: str, reason: str) -> list[dict[str, object]]:
    return [
        e
        for e in cluster.items(cluster.path("events", group="v1"))
        if e.get("involvedObject", {}).get("name") == pool and e.get("reason") == reason
    ]


def permissions(cluster: Cluster, pool: str) -> dict[str, str]:
    return cond(status(cluster, "replicapools", pool), "AgentPermissions")


def test_a_pool_whose_account_lacks_token_review_says_so_until_it_is_bound(
    cluster, reviews, operator
):
    """A pool running as an account without the agents' permissions gets AgentPermissions
    False naming the account, what it lacks and the chart value that fixes it, plus one Warning
    Event; once the account is bound, the condition turns True on the next review."""
    servers = make_pool(
        cluster, "irsa", 0, template={"serviceAccountName": "lorafleet-replica"}, autoscaling=TICK
    )
    try:
        c = eventually(lambda: (p := permissions(cluster, "irsa")) and p, what="the condition")
        assert (c["status"], c["reason"]) == ("False", "MissingPermissions")
        message = c["message"]
        assert f"ServiceAccount {NS}/lorafleet-replica" in message
        assert "create tokenreviews.authentication.k8s.io" in message
        assert "create events" in message
        assert "serviceAccount.agent.extraAccounts" in message
        warning = eventually(
            lambda: events(cluster, "irsa", "MissingPermissions"), what="the Warning Event"
        )
        assert warning[0]["type"] == "Warning"
        assert warning[0]["message"] == message

        reviews.bindings += chart_bindings("lorafleet-replica")
        fixed = eventually(
            lambda: (p := permissions(cluster, "irsa"))["status"] == "True" and p,
            what="the condition after the binding",
        )
        assert fixed["reason"] == "PermissionsGranted"
        # One Event for the finding, not one per tick of the pool's loop.
        assert len(events(cluster, "irsa", "MissingPermissions")) == 1
    finally:
        for s in servers:
            s.close()


def test_a_pool_on_the_agents_account_is_granted(cluster, reviews, operator):
    """A pool naming no account runs as the agents' (bound by the chart): the condition is True."""
    servers = make_pool(cluster, "plain", 0, autoscaling=TICK)
    try:
        c = eventually(lambda: (p := permissions(cluster, "plain")) and p, what="the condition")
        assert (c["status"], c["reason"]) == ("True", "PermissionsGranted")
        assert f"{NS}/{AGENT}" in c["message"]
        assert not events(cluster, "plain", "MissingPermissions")
    finally:
        for s in servers:
            s.close()


def test_pools_sharing_an_account_share_one_review_per_interval(cluster, reviews, operator):
    """Three pools of one account, each ticking every 0.2 s: the API server is asked once per
    permission and interval, not once per pool and tick."""
    start = time.monotonic()
    servers = [
        s
        for name in ("share-a", "share-b", "share-c")
        for s in make_pool(
            cluster, name, 1, template={"serviceAccountName": "shared"}, autoscaling=TICK
        )
    ]
    try:
        # 45 ticks in all: 90 reviews of the two permissions, were each tick to ask.
        eventually(lambda: sum(s.hits for s in servers) >= 45, what="45 ticks of the pools")
        asked = reviews.count(sa("shared"))
        elapsed = time.monotonic() - start
        assert asked <= 2 * (elapsed / REVIEW_INTERVAL_S + 1), (asked, elapsed)
        for name in ("share-a", "share-b", "share-c"):
            assert permissions(cluster, name)["reason"] == "MissingPermissions"
    finally:
        for s in servers:
            s.close()


def test_a_deleted_gateway_secret_is_recreated_without_a_restart(cluster, reviews, operator):
    """The gateway pool's inside Secret, deleted while the operator runs, comes back with new
    tokens (and a second InternalSecretCreated Event)."""
    servers = make_pool(cluster, "gwpool", 0, autoscaling=TICK)
    path = cluster.path("secrets", "gwpool-internal", group="v1")
    try:
        first = eventually(lambda: cluster.get(path), what="the gateway pool's Secret")
        eventually(lambda: events(cluster, "gwpool", "InternalSecretCreated"), what="its Event")
        cluster.delete(path)
        again = eventually(lambda: cluster.get(path), what="the Secret recreated")
        assert again["stringData"]["agent-token"] != first["stringData"]["agent-token"]
        eventually(
            lambda: len(events(cluster, "gwpool", "InternalSecretCreated")) == 2,
            what="the second InternalSecretCreated Event",
        )
    finally:
        for s in servers:
            s.close()
