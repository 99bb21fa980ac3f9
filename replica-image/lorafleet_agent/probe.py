"""Container hooks of a replica pod, run by the kubelet inside the containers (exec).

    python3 -m lorafleet_agent.probe engine [--url http://127.0.0.1:8000]
        exit 0 when vLLM answers GET /health within the timeout (startup and liveness probe of
        the vLLM container: vLLM listens on loopback only, so the kubelet cannot reach it with
        an httpGet probe, and the agent's own /healthz says nothing about a hung engine);
    python3 -m lorafleet_agent.probe drain [--metrics URL] [--timeout S] [--settle S]
        preStop of both containers: wait until the agent has no queued or streaming request
        (its /metrics gauges), at least `--settle` seconds so the gateways see the pod
        terminating and stop routing to it, at most `--timeout` seconds. vLLM is stopped only
        after this returns, so a stream in flight finishes instead of being cut.

The standard library and the metric names only (no event loop, no third-party import): a
probe starts a fresh interpreter every few seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

from lorafleet_core.wire import agent_api, metric_names

BUSY_GAUGES = (metric_names.AGENT_RUNNING_REQUESTS, metric_names.AGENT_QUEUE_DEPTH)


def engine_healthy(url: str, timeout_s: float) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as r:  # noqa: S310
            return bool(r.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def busy_requests(metrics_text: str) -> float:
    """Sum of the agent's queued and streaming requests in a Prometheus text exposition."""
    total = 0.0
    for line in metrics_text.splitlines():
        name, _, value = line.partition(" ")
        if name in BUSY_GAUGES:
            total += float(value)
    return total


def _read_busy(metrics_url: str) -> float | None:
    try:
        with urllib.request.urlopen(metrics_url, timeout=2.0) as r:  # noqa: S310
            return busy_requests(r.read().decode())
    except (OSError, urllib.error.URLError, ValueError):
        return None  # the agent is gone (or going): nothing left to wait for


def drain(
    read_busy: Callable[[], float | None],
    *,
    timeout_s: float,
    settle_s: float,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> str:
    """Wait for idle (see the module docstring); returns why it stopped: idle|gone|timeout."""
    start = clock()
    while True:
        busy = read_busy()
        elapsed = clock() - start
        if busy is None:
            return "gone"
        if busy == 0 and elapsed >= settle_s:
            return "idle"
        if elapsed >= timeout_s:
            return "timeout"
        pause(poll_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m lorafleet_agent.probe")
    sub = parser.add_subparsers(dest="hook", required=True)
    eng = sub.add_parser("engine", help="exit 0 when vLLM's /health answers")
    eng.add_argument("--url", default="http://127.0.0.1:8000")
    eng.add_argument("--timeout", type=float, default=4.0)
    dr = sub.add_parser("drain", help="wait until the agent serves no request")
    dr.add_argument("--metrics", default="http://127.0.0.1:8101" + agent_api.AGENT_ONLY_METRICS)
    dr.add_argument("--timeout", type=float, default=120.0)
    dr.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.hook == "engine":
        return 0 if engine_healthy(args.url, args.timeout) else 1
    why = drain(lambda: _read_busy(args.metrics), timeout_s=args.timeout, settle_s=args.settle)
    print(f"drain: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
