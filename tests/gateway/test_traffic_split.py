"""choose_version: the one choice of a weighted alias's version, over many requests."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from lorafleet_core.planning.traffic_split import bucket, choose_version, user_of
from lorafleet_gateway.catalog import AliasTarget

N = 10_000
ALIAS = "acme/support:prod"


def shares(split: list[tuple[str, int]], users: bool) -> dict[str, float]:
    rng = random.Random(7)
    seen = Counter(
        choose_version(ALIAS, "v1", split, f"user-{i}" if users else None, rng.randrange)
        for i in range(N)
    )
    return {v: 100 * n / N for v, n in seen.items()}


@pytest.mark.parametrize("users", [False, True], ids=["anonymous", "by-user"])
@pytest.mark.parametrize(
    ("split", "expected"),
    [
        ([("v2", 5)], {"v1": 95, "v2": 5}),
        ([("v2", 50)], {"v1": 50, "v2": 50}),
        ([("v2", 10), ("v3", 30)], {"v1": 60, "v2": 10, "v3": 30}),
    ],
    ids=["95/5", "50/50", "60/10/30"],
)
def test_observed_split_within_two_points(split, expected, users):
    observed = shares(split, users)
    assert set(observed) == set(expected)
    for version, percent in expected.items():
        assert abs(observed[version] - percent) <= 2, (version, observed)


def test_no_split_is_always_the_primary():
    assert {choose_version(ALIAS, "v1", [], None) for _ in range(100)} == {"v1"}


def test_each_user_always_gets_the_same_version():
    rng = random.Random(3)
    users = [f"user-{i}" for i in range(500)]
    first = {u: choose_version(ALIAS, "v1", [("v2", 50)], u, rng.randrange) for u in users}
    for _ in range(20):
        for u in users:
            # The draw is ignored once a user is named: a stable hash places them.
            assert choose_version(ALIAS, "v1", [("v2", 50)], u, rng.randrange) == first[u]
    assert set(first.values()) == {"v1", "v2"}


def test_raising_a_weight_only_moves_users_onto_that_version():
    users = [f"user-{i}" for i in range(2000)]
    at5 = {u: choose_version(ALIAS, "v1", [("v2", 5)], u) for u in users}
    at50 = {u: choose_version(ALIAS, "v1", [("v2", 50)], u) for u in users}
    assert all(at50[u] == "v2" for u in users if at5[u] == "v2")
    assert sum(v == "v2" for v in at50.values()) > 5 * sum(v == "v2" for v in at5.values())


def test_the_bucket_depends_on_the_alias_too():
    """One user is not on the canary of every alias at once."""
    users = [f"user-{i}" for i in range(200)]
    same = sum(bucket("acme/a:prod", u) == bucket("acme/b:prod", u) for u in users)
    assert same < 20


def test_the_seeded_draw_decides_anonymous_requests():
    def run(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [choose_version(ALIAS, "v1", [("v2", 50)], None, rng.randrange) for _ in range(50)]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_user_of_reads_user_then_safety_identifier():
    assert user_of({"user": "u1", "safety_identifier": "s1"}) == "u1"
    assert user_of({"safety_identifier": "s1"}) == "s1"
    assert user_of({"user": "", "safety_identifier": "s1"}) == "s1"
    assert user_of({"user": 7}) is None
    assert user_of({}) is None


def test_the_gateway_target_uses_the_same_choice():
    target = AliasTarget(ALIAS, "acme", "v1", (("v2", 50),))
    for i in range(200):
        user = f"user-{i}"
        assert target.version_for(user) == choose_version(ALIAS, "v1", [("v2", 50)], user)
    assert target.traffic() == "v1=50,v2=50"
    assert target.adapter_ids() == ("v1", "v2")
