"""Weighted aliases in the gateway: the catalog reads the split in force (files and kube
backends), and requests over real HTTP reach both versions in proportion, sticky by user."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

import openai
import pytest
from kubernetes_asyncio import client as k8s

from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_build import build_snapshot
from lorafleet_gateway.catalog_kube import KubeCatalog
from tests.gateway import manifests as m
from tests.gateway.conftest import GatewayEnv, default_aliases
from tests.gateway.test_gateway_usage import usage_counters
from tests.operator.kmock_cluster import Cluster
from tests.waiting import eventually_async

MSG: Any = [{"role": "user", "content": "hi"}]
READY = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "Serving",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
]
READY_ADAPTER = {"phase": "Ready"}


def split_alias(primary: str, *pairs: tuple[str, int], status: Any = None) -> dict[str, Any]:
    doc = m.alias("acme/support:prod", primary, status=status)
    if pairs:
        doc["spec"]["split"] = [{"adapter": a, "weight": w} for a, w in pairs]
    return doc


def build(aliases: list[dict[str, Any]], *, allow: bool) -> Any:
    adapters = [
        m.adapter("acme-support-v1", "acme", status=READY_ADAPTER),
        m.adapter("acme-support-v2", "acme", status=READY_ADAPTER),
        m.adapter("acme-support-v3", "acme", status={"phase": "Rejected"}),
        m.adapter("globex-bot-v1", "globex", status=READY_ADAPTER),
    ]
    return build_snapshot(
        adapters=adapters,
        aliases=aliases,
        secrets=[],
        pools=[],
        replicas=[],
        allow_missing_status=allow,
        version=1,
    ).aliases["acme/support:prod"]


def test_the_operator_status_decides_the_split_in_force():
    status = {"adapter": "acme-support-v1", "conditions": READY}
    # spec asks for 50/50 but the operator has not let v2 in yet: all on v1.
    waiting = split_alias("acme-support-v1", ("acme-support-v2", 50), status=status)
    assert build([waiting], allow=False).split == ()
    in_force = {**status, "split": [{"adapter": "acme-support-v2", "weight": 50}]}
    admitted = split_alias("acme-support-v1", ("acme-support-v2", 50), status=in_force)
    assert build([admitted], allow=False).split == (("acme-support-v2", 50),)


def test_manifests_without_status_serve_the_spec_split():
    doc = split_alias("acme-support-v1", ("acme-support-v2", 5))
    target = build([doc], allow=True)
    assert (target.adapter_id, target.split) == ("acme-support-v1", (("acme-support-v2", 5),))


@pytest.mark.parametrize(
    "version",
    ["acme-support-v3", "globex-bot-v1", "missing-v9"],
    ids=["rejected", "foreign", "missing"],
)
def test_a_version_not_servable_here_takes_no_share(version):
    status = {
        "adapter": "acme-support-v1",
        "conditions": READY,
        "split": [{"adapter": version, "weight": 50}],
    }
    assert build([split_alias("acme-support-v1", status=status)], allow=False).split == ()
    assert build([split_alias("acme-support-v1", (version, 50))], allow=True).split == ()


@pytest.mark.parametrize(
    "split",
    [
        "v2=5",
        [{"adapter": "acme-support-v2", "weight": 100}],
        [{"adapter": "acme-support-v2", "weight": "5"}],
        [
            {"adapter": "acme-support-v2", "weight": 60},
            {"adapter": "acme-support-v1", "weight": 60},
        ],
    ],
)
def test_a_status_split_that_does_not_read_is_no_split(split):
    status = {"adapter": "acme-support-v1", "conditions": READY, "split": split}
    assert build([split_alias("acme-support-v1", status=status)], allow=False).split == ()


def models_seen(env: GatewayEnv, n: int, user: str | None = None) -> Counter[str]:
    client = env.client()
    seen: Counter[str] = Counter()
    for _ in range(n):
        raw = client.chat.completions.with_raw_response.create(
            model="acme/support:prod",
            messages=MSG,
            max_tokens=4,
            user=user if user is not None else openai.omit,
        )
        answer = raw.parse()
        # The answer, its header and (below) its usage all name the version that served it.
        assert raw.headers["x-adapter-id"] == answer.model
        seen[answer.model] += 1
    return seen


def test_requests_reach_both_versions_in_proportion_and_stick_by_user(env: GatewayEnv):
    aliases = default_aliases()
    aliases[0]["spec"]["split"] = [{"adapter": "acme-support-v2", "weight": 50}]
    env.write_aliases(aliases)
    anonymous = models_seen(env, 400)
    assert set(anonymous) == {"acme-support-v1", "acme-support-v2"}
    # 50/50 over 400 requests: 200 each, standard deviation 10; 4 deviations either side.
    assert 160 <= anonymous["acme-support-v2"] <= 240, anonymous

    per_user = {f"user-{i}": models_seen(env, 5, f"user-{i}") for i in range(20)}
    assert all(len(seen) == 1 for seen in per_user.values()), per_user  # sticky
    landed = {next(iter(seen)) for seen in per_user.values()}
    assert landed == {"acme-support-v1", "acme-support-v2"}  # and still split

    # safety_identifier places a user the same way when `user` is absent.
    user, seen = next(iter(per_user.items()))
    raw = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, extra_body={"safety_identifier": user}
    )
    assert raw.model == next(iter(seen))

    counters = usage_counters(env)
    served = {
        a: counters[("lorafleet_gateway_usage_requests", "acme", a)]
        for a in ("acme-support-v1", "acme-support-v2")
    }
    assert served["acme-support-v1"] >= anonymous["acme-support-v1"]
    assert served["acme-support-v2"] >= anonymous["acme-support-v2"]
    assert sum(served.values()) >= 400 + 100 + 1

    # Rollback: remove the entry; every request is v1 again.
    aliases[0]["spec"].pop("split")
    env.write_aliases(aliases)
    assert models_seen(env, 30) == Counter({"acme-support-v1": 30})


async def test_the_kube_catalog_follows_a_split_through_the_watch():
    cluster = Cluster("serving")
    try:
        await _kube_rollout(cluster)
    finally:
        cluster.close()


async def _kube_rollout(cluster: Cluster) -> None:
    cluster.create(cluster.path("replicapools"), m.pool(owners=1))
    for version in ("acme-support-v1", "acme-support-v2"):
        cluster.create(
            cluster.path("loraadapters"), m.adapter(version, "acme", status=READY_ADAPTER)
        )
    cluster.create(
        cluster.path("adapteraliases"),
        split_alias("acme-support-v1", status={"adapter": "acme-support-v1", "conditions": READY}),
    )
    api = k8s.ApiClient(k8s.Configuration(host=cluster.url))
    holder = CatalogHolder()
    source = KubeCatalog(
        holder, namespace="serving", pool="default", api_client=api, debounce_s=0.01
    )
    await source.load_once()

    def split() -> Any:
        target = holder.current.resolve("acme", "acme/support:prod")
        return None if target is None else target.split

    assert split() == ()
    task = asyncio.create_task(source.run())
    try:
        # The operator lets v2 in at 5%, then 50%, then the rollback removes it.
        for weights in ([5], [50], []):
            patch = [{"adapter": "acme-support-v2", "weight": w} for w in weights]
            await asyncio.to_thread(
                cluster.patch,
                cluster.path("adapteraliases", "acme-support-prod"),
                {"spec": {"split": patch or None}, "status": {"split": patch or None}},
            )
            want = tuple(("acme-support-v2", w) for w in weights)
            await eventually_async(lambda w=want: split() == w, what=f"the catalog at {want}")  # type: ignore[misc]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
