"""What `lorafleet status` reports, as data (printed as text, or as JSON/YAML with `-o`).

What an SRE asks first, fleet-wide and per replica: how many replicas answer, queue depth,
tokens in flight, evictions per minute (thrash), adapters per tier and the GPU hit rate; per
alias the version that serves (and the one asked for, when a deploy is refused); the tenants
with the largest share of requests over the TTFT target (from the gateway's rolling-window
gauges), and each merged pool's replicas (pool, adapter, checksum, state). Standalone reads
`<state>/up.json` and asks each process; a cluster gives the custom
resources' status, and the gateway's metrics when `--gateway-metrics URL` reaches them (e.g.
through `kubectl port-forward`); replica internals are not reachable from outside a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from lorafleet_cli.targets import Target
from lorafleet_core.api import names
from lorafleet_core.wire import metric_names
from lorafleet_core.wire.agent_api import AGENT_ONLY_METRICS
from lorafleet_core.wire.replica_client import StateUnavailable, fetch_state_sync
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_core.wire.tiers import TIER_NAMES
from lorafleet_standalone.state_files import (
    RECONCILE_STATUS_FILE,
    UP_STATUS_FILE,
    StateFileError,
    read_state_json,
    up_alive,
)

WORST_TENANTS = 5

Report = dict[str, Any]


def _families(metrics_text: str) -> Any:
    from prometheus_client.parser import text_string_to_metric_families

    return text_string_to_metric_families(metrics_text)


def tier_hits(metrics_text: str) -> dict[str, float]:
    """Requests served per tier, from the agent's request counter.

    The agent counts each request by the tier it found the adapter in; a gpu share close to 1
    means the hot set fits the GPU slots.
    """
    out: dict[str, float] = {}
    for family in _families(metrics_text):
        if family.name != metric_names.AGENT_REQUESTS:
            continue
        for sample in family.samples:
            tier = sample.labels.get("tier")
            if tier and sample.name.endswith("_total"):
                out[tier] = out.get(tier, 0.0) + float(sample.value)
    return out


def hit_rate(hits: Mapping[str, float]) -> str:
    total = sum(hits.values())
    if not total:
        return "-"
    return ", ".join(f"{t} {100 * hits.get(t, 0) / total:.0f}%" for t in TIER_NAMES)


def gpu_share(hits: Mapping[str, float]) -> float | None:
    total = sum(hits.values())
    return hits.get("gpu", 0.0) / total if total else None


def worst_tenants(metrics_text: str, n: int = WORST_TENANTS) -> list[dict[str, Any]]:
    """Tenants by share of requests over the TTFT target, worst first, from one gateway's
    per-tenant counters (tenants active in its window; counts since the tenant appeared)."""
    misses: dict[str, float] = {}
    requests: dict[str, float] = {}
    for family in _families(metrics_text):
        into = {
            metric_names.GATEWAY_TENANT_TTFT_OVER_TARGET: misses,
            metric_names.GATEWAY_TENANT_REQUESTS: requests,
        }.get(family.name)
        if into is None:
            continue
        for sample in family.samples:
            tenant = sample.labels.get("tenant")
            if tenant:
                into[tenant] = into.get(tenant, 0.0) + float(sample.value)
    ranked = sorted(
        ((m / r, int(m), int(r), t) for t, r in requests.items() if r and (m := misses.get(t, 0))),
        key=lambda row: (-row[0], -row[1], row[3]),
    )
    return [
        {"tenant": t, "requests": r, "overTarget": m, "share": share}
        for share, m, r, t in ranked[:n]
    ]


def replica_report(state: ReplicaState, hits: Mapping[str, float]) -> Report:
    return {
        "id": state.replica_id,
        "reachable": True,
        "engineReady": state.engine_ready,
        "queueDepth": state.queue_depth,
        "runningRequests": state.running_requests,
        "tokensInFlight": state.tokens_in_flight,
        "loadsPerMin": state.loads_per_min,
        "evictionsPerMin": state.evictions_per_min,
        "adapters": {
            "gpu": len(state.gpu_adapters),
            "ram": len(state.ram_adapters),
            "disk": len(state.disk_adapters),
            "failed": len(state.failed_adapters),
        },
        "requestsByTier": dict(hits),
        "gpuHitRate": gpu_share(hits),
        "failed": dict(sorted(state.failed_adapters.items())),
    }


def fleet_totals(replicas: list[Report]) -> Report:
    up = [r for r in replicas if r.get("reachable")]
    hits: dict[str, float] = {}
    for r in up:
        for tier, n in r["requestsByTier"].items():
            hits[tier] = hits.get(tier, 0.0) + n
    return {
        "replicas": len(replicas),
        "reachable": len(up),
        "queueDepth": sum(r["queueDepth"] for r in up),
        "tokensInFlight": sum(r["tokensInFlight"] for r in up),
        "evictionsPerMin": round(sum(r["evictionsPerMin"] for r in up), 2),
        "adapters": {t: sum(r["adapters"][t] for r in up) for t in ("gpu", "ram", "disk")},
        "requestsByTier": hits,
        "gpuHitRate": gpu_share(hits),
    }


def _get(client: httpx.Client, url: str) -> httpx.Response:
    resp = client.get(url)
    resp.raise_for_status()
    return resp


def _replica(client: httpx.Client, replica: Mapping[str, Any]) -> Report:
    rid, base = replica["id"], replica["internalUrl"]
    try:
        state = fetch_state_sync(client, base, rid)
    except StateUnavailable as exc:
        return {"id": rid, "reachable": False, "error": str(exc)}
    try:
        hits = tier_hits(
            _get(client, base.rstrip("/") + AGENT_ONLY_METRICS).text
        )  # no engine scrape
    except (httpx.HTTPError, ValueError):
        hits = {}
    return replica_report(state, hits)


def merged_replica_state(
    state: ReplicaState | None, adapter: str | None, checksum: str | None
) -> str:
    """One merged replica in a word: serving its pool's weights, or what is wrong. The
    gateway sends it requests only when `serving` (pool_router: the replica's own word)."""
    if state is None:
        return "unreachable"
    weights = state.merged
    if weights is None:
        return "not merged"  # a LoRA replica: never a merged candidate
    if weights.adapter_id != adapter or (checksum and weights.checksum != checksum):
        return f"wrong weights ({weights.adapter_id} {weights.checksum})"
    if not state.engine_ready:
        return "engine down"  # its agent answers, its vLLM does not: the gateway skips it
    return "warming" if state.warming else "serving"


def _merged_pools(client: httpx.Client, rows: Sequence[Mapping[str, Any]]) -> list[Report]:
    """up.json's merged pools, each replica asked for its state."""
    out: list[Report] = []
    for row in rows:
        adapter, checksum = row.get("adapter"), row.get("checksum")
        replicas: list[Report] = []
        for r in row.get("replicas", []):
            try:
                state: ReplicaState | None = fetch_state_sync(client, r["internalUrl"], r["id"])
            except StateUnavailable:
                state = None
            replicas.append(
                {
                    "id": r["id"],
                    "state": merged_replica_state(state, adapter, checksum),
                    "queueDepth": state.queue_depth if state else None,
                    "tokensInFlight": state.tokens_in_flight if state else None,
                }
            )
        out.append(
            {"pool": row["pool"], "adapter": adapter, "checksum": checksum} | {"replicas": replicas}
        )
    return out


def cluster_merged_pools(pools: Sequence[Mapping[str, Any]]) -> list[Report]:
    """Merged ReplicaPools from their spec and status (replica internals are not reachable
    from outside a cluster: counts, the merge and the Ready reason, e.g. Draining)."""
    out: list[Report] = []
    for p in pools:
        merged = (p.get("spec") or {}).get("merged")
        if not merged:
            continue
        st = dict(p.get("status") or {})
        merge = st.get("merge") or {}
        conds = st.get("conditions") or []
        ready: dict[str, Any] = next((c for c in conds if c.get("type") == "Ready"), {})
        labels = (p.get("metadata") or {}).get("labels") or {}
        out.append(
            {
                "pool": p["metadata"]["name"],
                "adapter": merged.get("adapter"),
                "checksum": merge.get("checksum"),
                "merge": merge.get("phase"),
                "replicas": st.get("replicas"),
                "readyReplicas": st.get("readyReplicas"),
                "state": ready.get("reason"),
                "autoMerge": labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY_OPERATOR,
            }
        )
    return out


def gateway_tenants(client: httpx.Client, metrics_url: str | None) -> list[dict[str, Any]] | None:
    """Worst tenants from the gateway's /metrics; None when it cannot be read."""
    if not metrics_url:
        return None
    try:
        return worst_tenants(_get(client, metrics_url).text)
    except (httpx.HTTPError, ValueError):
        return None


def standalone(state_dir: Path) -> Report | None:
    """The report of a running `lorafleet up` in `state_dir`; None when there is none.

    Raises StateFileError when its state files are unreadable."""
    up_file = state_dir / UP_STATUS_FILE
    if not up_file.is_file():
        return None
    up = read_state_json(up_file)
    alive = up_alive(up)
    try:
        report: Report = {
            "mode": "standalone",
            "phase": up.get("phase") if alive else f"not running (pid {up.get('pid')} is gone)",
            "manifests": up.get("manifests"),
            "gateway": up["gateway"]["url"],
            "processes": {
                name: {
                    "pid": p["pid"],
                    "running": bool(p.get("running")) and alive,
                    "restarts": p.get("restarts", 0),
                    "failed": p.get("failed"),
                }
                for name, p in sorted(up.get("processes", {}).items())
            },
        }
    except (KeyError, TypeError, AttributeError) as exc:
        raise StateFileError(f"{up_file} lacks {exc}; restart `lorafleet up`") from exc
    with httpx.Client(timeout=3.0) as client:
        replicas = [_replica(client, r) for r in up.get("replicas", [])]
        merged = _merged_pools(client, up.get("mergedPools", []))
        internal = up["gateway"].get("internalUrl")
        tenants = gateway_tenants(client, f"{internal}/metrics" if internal else None)
    report["fleet"] = fleet_totals(replicas)
    report["replicas"] = replicas
    report["mergedPools"] = merged
    report["worstTenants"] = tenants
    rec_file = state_dir / RECONCILE_STATUS_FILE
    if rec_file.is_file():
        rec = read_state_json(rec_file)
        try:
            traffic = rec.get("traffic") or {}
            report["aliases"] = [
                {"model": m, "serving": a, **({"split": traffic[m]} if m in traffic else {})}
                for m, a in rec.get("models", {}).items()
            ]
            report["adapters"] = [
                {"name": a, "phase": v.get("phase"), "owners": v.get("owners", [])}
                for a, v in rec.get("adapters", {}).items()
            ]
            report["problems"] = [p["text"] for p in rec.get("problems", [])]
        except (KeyError, TypeError, AttributeError) as exc:
            raise StateFileError(
                f"{rec_file} is malformed ({exc!r}); it is rewritten on the next reconcile"
            ) from exc
    return report


def _deployed(alias: Mapping[str, Any]) -> str | None:
    for c in (alias.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Deployed":
            return str(c.get("status"))
    return None


def cluster(target: Target, namespace: str, gateway_metrics: str | None = None) -> Report:
    def st(o: Mapping[str, Any]) -> dict[str, Any]:
        return dict(o.get("status") or {})

    pools = target.list(names.KIND_POOL)
    adapters = target.list(names.KIND_ADAPTER)
    aliases = target.list(names.KIND_ALIAS)
    phases: dict[str, int] = {}
    for a in adapters:
        phase = st(a).get("phase") or "Pending"
        phases[phase] = phases.get(phase, 0) + 1
    with httpx.Client(timeout=3.0) as client:
        tenants = gateway_tenants(client, gateway_metrics)
    return {
        "mode": "cluster",
        "namespace": namespace,
        "pools": [
            {
                "name": p["metadata"]["name"],
                "replicas": st(p).get("replicas"),
                "readyReplicas": st(p).get("readyReplicas"),
                "desiredReplicas": st(p).get("desiredReplicas"),
            }
            for p in pools
        ],
        "mergedPools": cluster_merged_pools(pools),
        "adaptersByPhase": dict(sorted(phases.items())),
        "adapters": [
            {
                "name": a["metadata"]["name"],
                "phase": st(a).get("phase"),
                "owners": st(a).get("owners", []),
            }
            for a in adapters
        ],
        "aliases": [
            {
                "model": a["spec"]["model"],
                "serving": st(a).get("adapter"),
                "wanted": a["spec"]["adapter"],
                "previous": st(a).get("previousAdapter"),
                "deployed": _deployed(a),
            }
            for a in aliases
        ],
        "worstTenants": tenants,
    }
