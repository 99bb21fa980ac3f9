"""`lorafleet status`: the fleet at a glance (what status_report collects), as text or data.

Text for people; `-o json|yaml` for scripts (the same report, see status_report). Standalone
(a running `lorafleet up` in the state folder) shows every replica; a cluster shows the custom
resources' status, and the worst tenants by TTFT when `--gateway-metrics URL` reaches the
gateway's internal port (`kubectl port-forward svc/<release>-gateway-internal 8081:9090`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from typing import Any

from lorafleet_cli import status_report
from lorafleet_cli.exit_codes import FAILURE, OK, fail
from lorafleet_cli.output import add_output_argument, emit
from lorafleet_cli.status_report import hit_rate, tier_hits
from lorafleet_cli.targets import (
    DEFAULT_STATE_DIR,
    ClusterTarget,
    TargetError,
    add_target_arguments,
)
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_standalone.state_files import StateFileError

__all__ = ["cluster_report", "hit_rate", "replica_lines", "tier_hits"]


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _replica_text(r: Mapping[str, Any]) -> list[str]:
    if not r.get("reachable"):
        return [f"  {r['id']}: unreachable ({r.get('error')})"]
    a = r["adapters"]
    down = "" if r.get("engineReady", True) else "engine down (vLLM dead or hung), "
    return [
        f"  {r['id']}: {down}queue {r['queueDepth']}, running {r['runningRequests']}, "
        f"tokens in flight {r['tokensInFlight']}, loads/min {r['loadsPerMin']:.1f}, "
        f"evictions/min {r['evictionsPerMin']:.1f}",
        f"    adapters: gpu {a['gpu']}, ram {a['ram']}, disk {a['disk']}, failed {a['failed']}",
        f"    hit rate by tier: {hit_rate(r['requestsByTier'])}",
        *(f"    failed {aid}: {why}" for aid, why in r["failed"].items()),
    ]


def replica_lines(state: ReplicaState, hits: Mapping[str, float]) -> list[str]:
    return _replica_text(status_report.replica_report(state, hits))


def _tenant_lines(tenants: list[dict[str, Any]] | None) -> list[str]:
    if tenants is None:
        return ["worst tenants by TTFT: gateway metrics not reachable"]
    if not tenants:
        return ["worst tenants by TTFT: none over target"]
    return ["worst tenants by TTFT (share of requests over target, gateway window):"] + [
        f"  {t['tenant']}: {_pct(t['share'])} ({t['overTarget']}/{t['requests']})" for t in tenants
    ]


def _merged_text(pools: list[Mapping[str, Any]]) -> list[str]:
    if not pools:
        return []
    lines = ["merged pools:"]
    for p in pools:
        lines.append(f"  {p['pool']}: adapter {p['adapter']}, weights {p['checksum'] or '-'}")
        for r in p["replicas"]:
            load = ""
            if r.get("queueDepth") is not None:
                load = f", queue {r['queueDepth']}, tokens in flight {r['tokensInFlight']}"
            lines.append(f"    {r['id']}: {r['state']}{load}")
    return lines


def standalone_text(report: Mapping[str, Any], wide: bool = False) -> list[str]:
    lines = [
        f"standalone ({report['phase']}), manifests {report['manifests']}, "
        f"gateway {report['gateway']}",
        "processes:",
    ]
    for name, p in report["processes"].items():
        state = "running" if p["running"] else f"stopped ({p.get('failed') or 'exited'})"
        lines.append(f"  {name}: pid {p['pid']} {state}, restarts {p['restarts']}")
    f = report["fleet"]
    lines += [
        f"fleet: {f['reachable']}/{f['replicas']} replicas answer, queue {f['queueDepth']}, "
        f"tokens in flight {f['tokensInFlight']}, evictions/min {f['evictionsPerMin']:.1f}, "
        f"GPU hit rate {_pct(f['gpuHitRate'])}",
        f"  adapters: gpu {f['adapters']['gpu']}, ram {f['adapters']['ram']}, "
        f"disk {f['adapters']['disk']}",
        "replicas:",
    ]
    for r in report["replicas"]:
        lines += _replica_text(r)
    lines += _merged_text(report.get("mergedPools", []))
    if "aliases" in report:
        lines.append("models:")
        lines += [
            f"  {a['model']} -> {a['serving']}" + (f" (split {a['split']})" if "split" in a else "")
            for a in report["aliases"]
        ]
        if wide:
            lines.append("adapters (owners):")
            lines += [f"  {a['name']}: {', '.join(a['owners'])}" for a in report["adapters"]]
        else:
            lines.append(f"adapters: {len(report['adapters'])} (owners: -o wide)")
    lines += _tenant_lines(report["worstTenants"])
    if "problems" in report:
        lines.append(f"manifest problems: {len(report['problems'])}")
        lines += [f"  {p}" for p in report["problems"]]
    return lines


def _rows(objs: Iterable[Mapping[str, Any]], keys: list[str]) -> list[str]:
    def cell(value: Any) -> str:
        if isinstance(value, list):
            return ",".join(map(str, value)) or "-"
        return "-" if value is None else str(value)

    return ["  " + "  ".join(f"{k}={cell(o.get(k))}" for k in keys) for o in objs]


def cluster_text(report: Mapping[str, Any], wide: bool = True) -> list[str]:
    phases = ", ".join(f"{k} {v}" for k, v in report["adaptersByPhase"].items()) or "none"
    lines = [f"cluster, namespace {report['namespace']}", "pools:"]
    lines += _rows(report["pools"], ["name", "replicas", "readyReplicas", "desiredReplicas"])
    if report.get("mergedPools"):
        lines.append("merged pools:")
        keys = ["pool", "adapter", "checksum", "merge", "readyReplicas", "replicas", "state"]
        lines += _rows(report["mergedPools"], [*keys, "autoMerge"] if wide else keys)
    lines.append(f"adapters ({phases}):")
    if wide:
        lines += _rows(report["adapters"], ["name", "phase", "owners"])
    else:
        lines += _rows([a for a in report["adapters"] if a["phase"] != "Ready"], ["name", "phase"])
    lines.append("aliases (serving version):")
    for a in report["aliases"]:
        refused = f"  wanted={a['wanted']} (deploy refused)" if a["deployed"] == "False" else ""
        (row,) = _rows([{**a, "adapter": a["serving"] or a["wanted"]}], ["model", "adapter"])
        lines.append(f"{row}  previous={a['previous'] or '-'}{refused}")
    lines += _tenant_lines(report["worstTenants"])
    return lines


def cluster_report(target: ClusterTarget, gateway_metrics: str | None = None) -> list[str]:
    return cluster_text(status_report.cluster(target, target.namespace, gateway_metrics))


def _cmd_status(args: argparse.Namespace) -> int:
    report = None
    if not args.cluster:
        try:
            report = status_report.standalone(args.state_dir)
        except StateFileError as exc:
            return fail(exc, FAILURE)
        if report is None and args.manifests is not None:
            return fail(f"no `lorafleet up` state in {args.state_dir}")
    if report is None:
        try:
            target = ClusterTarget.from_kubeconfig(args.kubeconfig, args.context, args.namespace)
            report = status_report.cluster(target, target.namespace, args.gateway_metrics)
        except TargetError as exc:
            where = args.state_dir or DEFAULT_STATE_DIR
            return fail(f"no standalone state in {where} and no cluster: {exc}", FAILURE)
    if args.output in ("json", "yaml"):
        emit(report, args.output)
    else:
        text = standalone_text if report["mode"] == "standalone" else cluster_text
        print("\n".join(text(report, wide=args.output == "wide")))
    return OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "status",
        help="replicas, queues, tiers, GPU hit rate, what each alias serves, worst tenants",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_output_argument(p)  # table: a summary; wide: every adapter's owners too
    p.add_argument(
        "--gateway-metrics",
        default=None,
        help="the gateway's internal /metrics URL (cluster mode), for the worst tenants",
    )
    add_target_arguments(p)
    p.set_defaults(func=_cmd_status)
