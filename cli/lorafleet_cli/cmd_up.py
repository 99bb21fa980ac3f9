"""`lorafleet up [--manifests DIR] [--replicas N] [--model PATH] [--port P]`.

Runs lorafleet without Kubernetes. With `--manifests`, serves that folder (the files `kubectl
apply -f` takes) and watches it; without, builds the offline demo into the state folder first.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lorafleet_cli.targets import DEFAULT_STATE_DIR


def _cmd_up(args: argparse.Namespace) -> int:
    from lorafleet_standalone import demo
    from lorafleet_standalone.guards import UpError, lock_state_dir
    from lorafleet_standalone.local_replicas import free_port
    from lorafleet_standalone.runner import run_up
    from lorafleet_standalone.up_options import UpOptions

    state_dir: Path = args.state_dir.resolve()
    if args.manifests is not None and not args.manifests.is_dir():
        print(f"error: {args.manifests} is not a folder")
        return 2
    try:
        # Before the demo is (re)built there: a second `up` must not touch a running one's files.
        lock = lock_state_dir(state_dir)
    except UpError as exc:
        print(f"[lorafleet up] error: {exc}")
        return 1
    port = args.port or free_port()
    internal_port = args.internal_port or free_port()
    banner = None
    manifests = args.manifests
    if manifests is None:
        manifests = state_dir / "manifests"
        setup = demo.prepare_demo(
            state_dir, manifests, replicas=args.replicas or 1, progress=not args.quiet
        )
        banner = demo.usage_text(
            f"http://127.0.0.1:{port}", state_dir / demo.KEY_FILE, setup.models
        )
    return run_up(
        UpOptions(
            state_dir=state_dir,
            manifests_dir=manifests.resolve(),
            replicas=args.replicas,
            port=port,
            internal_port=internal_port,
            model=args.model.resolve() if args.model else None,
            pool=args.pool,
            banner=banner,
            control_port=args.control_port,
        ),
        lock,
    )


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0-65535 (0: any free one), got {value}")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "up",
        help="run lorafleet locally without Kubernetes (no arguments: the offline demo)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--manifests",
        type=Path,
        default=None,
        help="folder of manifests to serve and watch (default: build and serve the demo)",
    )
    p.add_argument(
        "--replicas",
        type=_at_least(1),
        default=None,
        help="local replicas (default: the pool's replicas.desired, else replicas.min; demo: 1)",
    )
    p.add_argument(
        "--model", type=Path, default=None, help="base model folder (default: the pool's uri)"
    )
    p.add_argument(
        "--port",
        type=_port,
        default=8080,
        help="gateway port on 127.0.0.1 (default %(default)s; 0: any free port)",
    )
    p.add_argument(
        "--internal-port",
        type=_port,
        default=9090,
        help="gateway metrics/health port (default %(default)s; 0: any free port)",
    )
    p.add_argument(
        "--control-port",
        type=_port,
        default=None,
        help="port of the control API (default: any free port; the admin token is written to "
        "<state-dir>/control-token)",
    )
    p.add_argument("--pool", default=None, help="ReplicaPool to serve (default: the only one)")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("LORAFLEET_STATE_DIR", DEFAULT_STATE_DIR)),
        help="state folder: demo assets, object store, logs, status (default: .lorafleet)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_cmd_up)
