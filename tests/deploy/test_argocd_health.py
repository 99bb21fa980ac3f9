"""The Argo CD health checks (deploy/argocd/health/*.lua), run in Lua 5.1 (what Argo CD's
gopher-lua speaks) on objects whose status the real planners wrote, for every state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from lupa import lua51

from lorafleet_core.api.models import AdapterAlias, AdapterPhase, LoRAAdapter
from lorafleet_core.planning.adapters import AdapterInputs, Validation, plan_adapter_status
from lorafleet_core.planning.aliases import (
    AdapterView,
    AliasClaim,
    plan_alias,
    plan_invalid_alias,
)
from lorafleet_core.planning.conditions import condition

REPO = Path(__file__).resolve().parents[2]
HEALTH = REPO / "deploy" / "argocd" / "health"
EXAMPLES = REPO / "examples"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def example(kind: str, name: str | None = None) -> dict[str, Any]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == kind and name in (None, doc["metadata"]["name"]):
                return dict(doc)
    raise AssertionError(f"no example {kind} {name}")


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) as Argo CD computes them: the script sees the object as global `obj`."""
    lua = lua51.LuaRuntime()
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((HEALTH / f"{obj['kind']}.lua").read_text())
    return str(result["status"]), str(result["message"])


# --- LoRAAdapter -------------------------------------------------------------------------------

VALID = Validation(True, "Valid", "matches ReplicaPool llama-7b", pool="llama-7b")


def adapter(inputs: AdapterInputs | None, generation: int | None = None) -> dict[str, Any]:
    body = example("LoRAAdapter", "acme-support-v1")
    body["metadata"] = {**body["metadata"], "generation": generation}
    if inputs is not None:
        status = plan_adapter_status(LoRAAdapter.model_validate(body), inputs, T0)
        body["status"] = status.wire()
    if generation is None:
        del body["metadata"]["generation"]
    return body


ADAPTER_CASES = {
    "no status yet": (adapter(None), "Progressing", "Waiting for the operator"),
    "ready": (
        adapter(AdapterInputs(VALID, owners=["r0", "r1"], owner_count=2, ready_replicas=2)),
        "Healthy",
        "OwnersAssigned",
    ),
    "pending without replicas": (
        adapter(AdapterInputs(VALID)),
        "Progressing",
        "NoReadyReplicas",
    ),
    "pending not validated": (
        adapter(AdapterInputs(Validation(False, "NoPool", "no ReplicaPool matches"))),
        "Progressing",
        "no ReplicaPool matches",
    ),
    # After an upgrade to the secure default: Pending, but only an edit of the pool helps, so
    # not Progressing (a sync would wait on it for ever).
    "pending, its pool lists no adapter sources": (
        adapter(AdapterInputs(Validation(False, "NoAdapterSources", "pool sets no sources"))),
        "Degraded",
        "NoAdapterSources: pool sets no sources",
    ),
    "rejected": (
        adapter(AdapterInputs(Validation(False, "RankTooHigh", "rank 32 > 16", final=True))),
        "Degraded",
        "RankTooHigh: rank 32 > 16",
    ),
    "failed on every owner": (
        adapter(
            AdapterInputs(
                VALID, owners=["r0"], owner_count=1, ready_replicas=1, failed_on={"r0": "bad"}
            )
        ),
        "Degraded",
        "ReplicaRejected",
    ),
}


@pytest.mark.parametrize("case", sorted(ADAPTER_CASES))
def test_adapter_health(case):
    obj, want, fragment = ADAPTER_CASES[case]
    status, message = health(obj)
    assert status == want, message
    assert fragment in message


def test_adapter_status_of_an_older_generation_is_progressing():
    obj = adapter(AdapterInputs(VALID, owners=["r0"], owner_count=1), generation=1)
    obj["metadata"]["generation"] = 2
    assert health(obj) == ("Progressing", "Waiting for the operator to observe generation 2")


# --- AdapterAlias ------------------------------------------------------------------------------


def alias_status(
    views: dict[str, AdapterView], *targets: str, rivals: list[AliasClaim] | None = None
) -> dict[str, Any]:
    """The alias after deploying each target in turn, as the operator would write it."""
    body = example("AdapterAlias")
    model = AdapterAlias.model_validate(body)
    for i, target in enumerate(targets):
        model.spec.adapter = target
        plan = plan_alias(model, views, rivals or [], T0 + timedelta(minutes=i))
        model.status = plan.status
    return model.wire()


def alias_served_then(later: dict[str, AdapterView], target: str) -> dict[str, Any]:
    """An alias that deployed `target`, replanned when the adapters look like `later`."""
    body = example("AdapterAlias")
    model = AdapterAlias.model_validate(body)
    model.spec.adapter = target
    model.status = plan_alias(model, VIEWS, [], T0).status
    model.status = plan_alias(model, later, [], T0 + timedelta(minutes=1)).status
    return model.wire()


def alias_past_its_deadline() -> dict[str, Any]:
    """An alias serving v1 whose deploy of an unverified version waited its whole deadline."""
    model = AdapterAlias.model_validate(example("AdapterAlias"))
    model.spec.adapter = "acme-support-v1"
    model.status = plan_alias(model, VIEWS, [], T0).status
    model.spec.adapter = "acme-unverified"
    model.status = plan_alias(model, VIEWS, [], T0 + timedelta(minutes=1)).status
    model.status = plan_alias(model, VIEWS, [], T0 + timedelta(minutes=11)).status
    return model.wire()


def invalid_alias() -> dict[str, Any]:
    """What the operator writes on an alias whose spec lacks `adapter` (kmock, no schema)."""
    body = example("AdapterAlias")
    del body["spec"]["adapter"]
    body["status"] = plan_invalid_alias(None, "spec.adapter: Field required", T0, None).wire()
    return body


READY = AdapterView(tenant="acme", phase=AdapterPhase.READY, verified=True)
VIEWS = {
    "acme-support-v1": READY,
    "acme-support-v2": READY,
    "acme-unverified": AdapterView(tenant="acme", phase=AdapterPhase.READY),
    "acme-rejected": AdapterView(tenant="acme", phase=AdapterPhase.REJECTED),
    "acme-pending": AdapterView(tenant="acme", phase=AdapterPhase.PENDING),
    "globex-v1": AdapterView(tenant="globex", phase=AdapterPhase.READY),
}
OLDER = AliasClaim(name="acme-older", model="acme/support:prod", created=T0 - timedelta(days=1))

ALIAS_CASES = {
    "no status yet": (example("AdapterAlias"), "Progressing", "Waiting for the operator"),
    "serving": (alias_status(VIEWS, "acme-support-v1"), "Healthy", "Serving acme-support-v1"),
    "rolled forward": (
        alias_status(VIEWS, "acme-support-v1", "acme-support-v2"),
        "Healthy",
        "Serving acme-support-v2",
    ),
    "deploy refused, old version serves": (
        alias_status(VIEWS, "acme-support-v1", "acme-rejected"),
        "Degraded",
        "still serving acme-support-v1",
    ),
    "target still pending": (
        alias_status(VIEWS, "acme-support-v1", "acme-pending"),
        "Progressing",
        "AdapterNotReady",
    ),
    "target ready, no replica verified it yet": (
        alias_status(VIEWS, "acme-support-v1", "acme-unverified"),
        "Progressing",
        "AwaitingReplicas",
    ),
    "deploy past its progress deadline, old version serves": (
        alias_past_its_deadline(),
        "Degraded",
        "ProgressDeadlineExceeded",
    ),
    "target missing, nothing served": (
        alias_status(VIEWS, "acme-nope"),
        "Missing",
        "AdapterNotFound",
    ),
    "target missing, old version serves": (
        alias_status(VIEWS, "acme-support-v1", "acme-nope"),
        "Degraded",
        "still serving acme-support-v1",
    ),
    "other tenant's adapter": (
        alias_status(VIEWS, "globex-v1"),
        "Degraded",
        "TenantMismatch",
    ),
    "model claimed by an older alias": (
        alias_status(VIEWS, "acme-support-v1", rivals=[OLDER]),
        "Degraded",
        "acme-older",
    ),
    "served adapter vanished": (
        alias_served_then(
            {k: v for k, v in VIEWS.items() if k != "acme-support-v1"}, "acme-support-v1"
        ),
        "Degraded",
        "AdapterNotFound",
    ),
    "served adapter failed": (
        alias_served_then(
            {**VIEWS, "acme-support-v1": AdapterView("acme", AdapterPhase.FAILED)},
            "acme-support-v1",
        ),
        "Degraded",
        "which is Failed",
    ),
    "served adapter back to pending (its pool recreated)": (
        alias_served_then(
            {**VIEWS, "acme-support-v1": AdapterView("acme", AdapterPhase.PENDING)},
            "acme-support-v1",
        ),
        "Progressing",
        "which is Pending",
    ),
    "spec without an adapter": (invalid_alias(), "Degraded", "InvalidSpec"),
}


@pytest.mark.parametrize("case", sorted(ALIAS_CASES))
def test_alias_health(case):
    obj, want, fragment = ALIAS_CASES[case]
    status, message = health(obj)
    assert status == want, message
    assert fragment in message


def test_alias_edited_after_the_last_status_is_progressing():
    obj = alias_status(VIEWS, "acme-support-v1")
    obj["spec"]["adapter"] = "acme-support-v2"  # applied; the operator has not run yet
    assert health(obj) == ("Progressing", "Waiting for the operator to deploy acme-support-v2")
    obj["metadata"]["generation"] = 3
    obj["status"]["observedGeneration"] = 2
    assert health(obj)[1] == "Waiting for the operator to observe generation 3"


# --- ReplicaPool -------------------------------------------------------------------------------


def pool(ready: int, desired: int, reason: str = "", pods: int | None = None) -> dict[str, Any]:
    """A pool status shaped as the autoscaler handler writes it."""
    body = example("ReplicaPool")
    pods = desired if pods is None else pods
    reason = reason or ("ReplicasReady" if ready else "NoReadyReplicas")
    cond = condition("Ready", ready > 0, reason, f"{ready}/{pods} replicas ready", T0)
    body["status"] = {
        "replicas": pods,
        "readyReplicas": ready,
        "desiredReplicas": desired,
        "conditions": [cond.wire()],
    }
    return body


POOL_CASES = {
    "no status yet": (example("ReplicaPool"), "Progressing", "Waiting for the operator"),
    "all ready": (pool(3, 3), "Healthy", "3/3 replicas ready"),
    "starting": (pool(0, 2), "Progressing", "NoReadyReplicas"),
    "scaling up": (pool(2, 4), "Progressing", "Scaling: 2/4 replicas ready"),
    "invalid spec": (pool(0, 0, reason="InvalidSpec", pods=0), "Degraded", "InvalidSpec"),
    "merge pending": (pool(0, 1, reason="MergePending"), "Progressing", "MergePending"),
    "merging": (pool(0, 1, reason="Merging"), "Progressing", "Merging"),
    "merge waits for its adapter": (
        pool(0, 1, reason="MergedAdapterNotFound"),
        "Progressing",
        "MergedAdapterNotFound",
    ),
    "merge failed": (pool(0, 1, reason="MergeFailed"), "Degraded", "MergeFailed"),
    "merged adapter of another base": (
        pool(0, 1, reason="BaseModelMismatch"),
        "Degraded",
        "BaseModelMismatch",
    ),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_pool_health(case):
    obj, want, fragment = POOL_CASES[case]
    status, message = health(obj)
    assert status == want, message
    assert fragment in message


# --- shipping ----------------------------------------------------------------------------------


def test_argocd_cm_patch_holds_the_scripts_verbatim():
    patch = yaml.safe_load((REPO / "deploy" / "argocd" / "argocd-cm-patch.yaml").read_text())
    assert patch["metadata"]["name"] == "argocd-cm"
    expected = {
        f"resource.customizations.health.lorafleet.dev_{p.stem}": p.read_text()
        for p in HEALTH.glob("*.lua")
    }
    assert patch["data"] == expected
    assert len(expected) == 3


def test_example_sync_waves_apply_pools_then_adapters_then_aliases():
    def kind_of(doc: dict[str, Any]) -> str:
        merged = doc["kind"] == "ReplicaPool" and doc["spec"].get("merged")
        return "MergedPool" if merged else str(doc["kind"])

    waves: dict[str, set[int]] = {}
    for path in EXAMPLES.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] in ("ReplicaPool", "LoRAAdapter", "AdapterAlias"):
                wave = int(doc["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"])
                waves.setdefault(kind_of(doc), set()).add(wave)
    assert max(waves["ReplicaPool"]) < min(waves["LoRAAdapter"])
    assert max(waves["LoRAAdapter"]) < min(waves["AdapterAlias"])
    # a merged pool waits for the adapter it merges: Healthy only once that exists
    assert max(waves["LoRAAdapter"]) < min(waves["MergedPool"])
