"""`lorafleet status`: replicas, adapters per tier, hit rates, queue depth, evictions/min.

Standalone (a running `lorafleet up` in the state folder): reads `<state>/up.json`, asks each
replica's agent for its state (`/internal/replicas/{id}/state`) and metrics, and shows the
reconciler's view (adapters, owners, manifest problems). Cluster: the CRs' status (pools,
adapters with phase and owners, aliases); replica internals are not reachable from outside the
cluster, so use the gateway's /metrics there.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from lorafleet_cli.targets import (
    DEFAULT_STATE_DIR,
    ClusterTarget,
    TargetError,
    add_target_arguments,
)
from lorafleet_core import names
from lorafleet_core.replica_client import StateUnavailable, fetch_state_sync
from lorafleet_core.replica_state import ReplicaState

REQUESTS_BY_TIER = "lorafleet_agent_requests"  # the agent's counter, label `tier`


def tier_hits(metrics_text: str) -> dict[str, float]:
    """Requests served per tier, from the agent's request counter.

    The agent counts each request by the tier it found the adapter in; a gpu share close to 1
    means the hot set fits the GPU slots.
    """
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != REQUESTS_BY_TIER:
            continue
        for sample in family.samples:
            tier = sample.labels.get("tier")
            if tier and sample.name.endswith("_total"):
                out[tier] = out.get(tier, 0.0) + float(sample.value)
    return out


def hit_rate(hits: dict[str, float]) -> str:
    total = sum(hits.values())
    if not total:
        return "-"
    parts = [f"{t} {100 * hits.get(t, 0) / total:.0f}%" for t in ("gpu", "ram", "disk", "remote")]
    return ", ".join(parts)


def replica_lines(state: ReplicaState, hits: dict[str, float]) -> list[str]:
    return [
        f"  {state.replica_id}: queue {state.queue_depth}, running {state.running_requests}, "
        f"tokens in flight {state.tokens_in_flight}, loads/min {state.loads_per_min:.1f}, "
        f"evictions/min {state.evictions_per_min:.1f}",
        f"    adapters: gpu {len(state.gpu_adapters)}, ram {len(state.ram_adapters)}, "
        f"disk {len(state.disk_adapters)}, failed {len(state.failed_adapters)}",
        f"    hit rate by tier: {hit_rate(hits)}",
        *(f"    failed {a}: {why}" for a, why in sorted(state.failed_adapters.items())),
    ]


def _fetch(client: httpx.Client, replica: dict[str, Any]) -> list[str]:
    rid, base = replica["id"], replica["internalUrl"]
    try:
        state = fetch_state_sync(client, base, rid)
    except StateUnavailable as exc:
        return [f"  {rid}: unreachable ({exc})"]
    try:
        hits = tier_hits(client.get(f"{base}/metrics").text)
    except (httpx.HTTPError, ValueError):
        hits = {}
    return replica_lines(state, hits)


def standalone_report(state_dir: Path) -> list[str] | None:
    up_file = state_dir / "up.json"
    if not up_file.is_file():
        return None
    up = json.loads(up_file.read_text())
    lines = [
        f"standalone ({up.get('phase')}), manifests {up.get('manifests')}, "
        f"gateway {up['gateway']['url']}",
        "processes:",
    ]
    for name, p in sorted(up.get("processes", {}).items()):
        state = "running" if p.get("running") else f"stopped ({p.get('failed') or 'exited'})"
        lines.append(f"  {name}: pid {p['pid']} {state}, restarts {p.get('restarts', 0)}")
    lines.append("replicas:")
    with httpx.Client(timeout=3.0) as client:
        for replica in up.get("replicas", []):
            lines.extend(_fetch(client, replica))
    rec_file = state_dir / "reconcile.json"
    if rec_file.is_file():
        rec = json.loads(rec_file.read_text())
        lines.append("models:")
        lines.extend(f"  {m} -> {a}" for m, a in rec.get("models", {}).items())
        lines.append("adapters (owners):")
        lines.extend(
            f"  {a}: {', '.join(v.get('owners', []))}" for a, v in rec.get("adapters", {}).items()
        )
        problems = rec.get("problems", [])
        lines.append(f"manifest problems: {len(problems)}")
        lines.extend(f"  {p['text']}" for p in problems)
    return lines


def _rows(objs: Iterable[dict[str, Any]], cols: list[tuple[str, Any]]) -> list[str]:
    return ["  " + "  ".join(f"{h}={fn(o)}" for h, fn in cols) for o in objs]


def cluster_report(target: ClusterTarget) -> list[str]:
    pools = target.list(names.KIND_POOL)
    adapters = target.list(names.KIND_ADAPTER)
    aliases = target.list(names.KIND_ALIAS)

    def st(o: dict[str, Any]) -> dict[str, Any]:
        return dict(o.get("status") or {})

    lines = [f"cluster, namespace {target.namespace}", "pools:"]
    lines += _rows(
        pools,
        [
            ("name", lambda o: o["metadata"]["name"]),
            ("replicas", lambda o: st(o).get("replicas", "-")),
            ("ready", lambda o: st(o).get("readyReplicas", "-")),
            ("desired", lambda o: st(o).get("desiredReplicas", "-")),
        ],
    )
    lines.append("adapters:")
    lines += _rows(
        adapters,
        [
            ("name", lambda o: o["metadata"]["name"]),
            ("phase", lambda o: st(o).get("phase", "-")),
            ("owners", lambda o: ",".join(st(o).get("owners", [])) or "-"),
        ],
    )
    lines.append("aliases:")
    lines += _rows(
        aliases,
        [
            ("model", lambda o: o["spec"]["model"]),
            ("adapter", lambda o: st(o).get("adapter") or o["spec"]["adapter"]),
            ("previous", lambda o: st(o).get("previousAdapter", "-")),
        ],
    )
    return lines


def _cmd_status(args: argparse.Namespace) -> int:
    if not args.cluster:
        lines = standalone_report(args.state_dir)
        if lines is not None:
            print("\n".join(lines))
            return 0
        if args.manifests is not None:
            print(f"no `lorafleet up` state in {args.state_dir}", file=sys.stderr)
            return 1
    try:
        target = ClusterTarget.from_kubeconfig(args.kubeconfig, args.context, args.namespace)
        print("\n".join(cluster_report(target)))
    except TargetError as exc:
        print(
            f"error: no standalone state in {args.state_dir or DEFAULT_STATE_DIR} and no "
            f"cluster: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("status", help="replicas, tiers, hit rates, queue depth, evictions")
    add_target_arguments(p)
    p.set_defaults(func=_cmd_status)
