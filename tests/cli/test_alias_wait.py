"""`alias set/rollback --wait` against a Kubernetes API (kmock over real HTTP). The operator's
part is played by the real alias planner: before each poll it reconciles the alias and writes
the status, as the operator would between two polls. The clock is fake, so the timeout case
takes no time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from lorafleet_cli.alias_wait import wait_until_served
from lorafleet_cli.cmd_alias import set_alias
from lorafleet_cli.exit_codes import CommandFailed
from lorafleet_cli.targets import ClusterTarget
from lorafleet_core.api.models import AdapterAlias, AdapterAliasStatus, AdapterPhase
from lorafleet_core.planning.aliases import AdapterView, plan_alias
from tests.manifest_folder import adapter_manifest, make_base_model, pool_manifest
from tests.operator.kmock_cluster import Cluster


class ReconcilingTarget(ClusterTarget):
    """A ClusterTarget whose alias status is reconciled by the real planner before each read;
    `phases` is the adapters' phase sequence the operator would see, one per poll."""

    def __init__(
        self,
        cluster: Cluster,
        api: Any,
        phases: dict[str, list[AdapterPhase]],
        unverified: frozenset[str] = frozenset(),
        minutes_per_poll: float = 0.0,
    ):
        super().__init__("wait", api)
        self.cluster = cluster
        self.phases = phases
        self.unverified = unverified  # Ready, but no replica reports their files verified
        self.minutes_per_poll = minutes_per_poll  # the operator's clock between two polls
        self.start = datetime.now(UTC)
        self.polls = 0

    def alias_status(self, name: str) -> AdapterAliasStatus | None:
        body = self.cluster.get(self.cluster.path("adapteraliases", name))
        assert body is not None
        alias = AdapterAlias.model_validate(body)
        views = {
            n: AdapterView(
                tenant="acme",
                phase=phase,
                verified=phase == AdapterPhase.READY and n not in self.unverified,
            )
            for n, seq in self.phases.items()
            for phase in [seq[min(self.polls, len(seq) - 1)]]
        }
        now = self.start + timedelta(minutes=self.polls * self.minutes_per_poll)
        status = plan_alias(alias, views, [], now).status
        self.cluster.patch(
            self.cluster.path("adapteraliases", name) + "/status", {"status": status.wire()}
        )
        self.polls += 1
        return super().alias_status(name)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(namespace="wait")
    pool = pool_manifest("main", make_base_model(tmp_path_factory.mktemp("base")))
    c.create(c.path("replicapools"), pool)
    for v in ("v1", "v2", "v3", "v4"):
        body = adapter_manifest(f"acme-x-{v}", "acme", pool["spec"]["baseModel"]["hash"])
        c.create(c.path("loraadapters"), body)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def api(cluster: Cluster) -> Configuration:
    return Configuration(host=cluster.url)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


READY, PENDING, REJECTED = AdapterPhase.READY, AdapterPhase.PENDING, AdapterPhase.REJECTED


def deploy_and_wait(cluster, api, model, phases, first, then, timeout=5.0):
    target = ReconcilingTarget(cluster, api, phases)
    set_alias(target, model, first)
    wait_until_served(target, model.replace("/", "-").replace(":", "-"), first, timeout)
    name, _ = set_alias(target, model, then)
    clock = FakeClock()
    status = wait_until_served(target, name, then, timeout, clock=clock, sleep=clock.sleep)
    return status, target, clock


def test_wait_returns_once_the_new_version_serves(cluster, api):
    phases = {"acme-x-v1": [READY], "acme-x-v2": [PENDING, PENDING, PENDING, READY]}
    status, target, _ = deploy_and_wait(
        cluster, api, "acme/a:prod", phases, "acme-x-v1", "acme-x-v2"
    )
    assert (status.adapter, status.previous_adapter) == ("acme-x-v2", "acme-x-v1")
    assert target.polls >= 4  # it waited through the Pending polls


def test_wait_fails_fast_when_the_deploy_is_refused(cluster, api):
    phases = {"acme-x-v1": [READY], "acme-x-v3": [REJECTED]}
    with pytest.raises(CommandFailed, match=r"deploy of acme-x-v3 refused \(AdapterNotReady"):
        deploy_and_wait(cluster, api, "acme/b:prod", phases, "acme-x-v1", "acme-x-v3")


def test_wait_times_out_while_the_target_stays_pending(cluster, api):
    phases = {"acme-x-v1": [READY], "acme-x-v4": [PENDING]}
    with pytest.raises(CommandFailed, match="does not serve acme-x-v4 after 5 s") as info:
        deploy_and_wait(cluster, api, "acme/c:prod", phases, "acme-x-v1", "acme-x-v4")
    assert "still serving acme-x-v1" in str(info.value)


def test_wait_ends_when_the_deploy_passes_its_progress_deadline(cluster, api):
    """No replica verifies the new version and the operator's clock passes the alias's
    progressDeadlineSeconds (600 s by default): --wait stops there, before its own timeout,
    saying so and what still serves."""
    phases = {"acme-x-v1": [READY], "acme-x-v2": [READY]}
    target = ReconcilingTarget(
        cluster, api, phases, unverified=frozenset({"acme-x-v2"}), minutes_per_poll=4
    )
    set_alias(target, "acme/d:prod", "acme-x-v1")
    wait_until_served(target, "acme-d-prod", "acme-x-v1", 5.0)
    set_alias(target, "acme/d:prod", "acme-x-v2")
    clock = FakeClock()
    with pytest.raises(CommandFailed, match="exceeded its progress deadline") as info:
        wait_until_served(target, "acme-d-prod", "acme-x-v2", 60, clock=clock, sleep=clock.sleep)
    assert "ProgressDeadlineExceeded: LoRAAdapter acme-x-v2 " in str(info.value)
    assert str(info.value).endswith("still serving acme-x-v1)")
    assert clock.now < 60  # the deadline ended it, not --timeout


def test_wait_flags_on_set_and_rollback():
    from lorafleet_cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(
        ["alias", "set", "acme/a:prod", "acme-x-v1", "--wait", "--timeout", "9"]
    )
    assert (args.wait, args.timeout) == (True, 9.0)
    args = parser.parse_args(["alias", "rollback", "acme/a:prod"])
    assert (args.wait, args.timeout) == (False, 120.0)
