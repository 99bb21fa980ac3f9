"""`lorafleet loadtest` against a throwaway `lorafleet up` sized so that adapter tiers matter.

    .venv/bin/python -m e2e.loadtest --replicas 1 -- --rates 2,6 --duration 60 --out DIR
    .venv/bin/python -m e2e.loadtest --copies 11 --gpu-slots 32 --host-ram-slots 40 \\
        --base-engine -- --overhead --adapter-counts 1,8,32

Everything after `--` goes to `lorafleet loadtest` (docs/reference/cli.md#loadtest; `-- A -- B` runs
two commands one after the other on the same fleet). This script only starts the fleet
(e2e/standalone_fleet.py: the demo plus `--copies` extra versions and aliases per canary, the
pool shrunk to `--gpu-slots`/`--host-ram-slots`), points the command at it (gateway URL, key
file, manifests for the markers, the fleet's aliases) and stops the fleet at the end. Exit
status: the worst of the commands', or 2 when the fleet did not start.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from e2e.standalone_fleet import FleetOptions, started_base_engine, started_fleet
from lorafleet_cli.main import main as lorafleet


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m e2e.loadtest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--gpu-slots", type=int, default=2, help="pool engine.gpuSlots (--max-loras)")
    ap.add_argument("--host-ram-slots", type=int, default=4, help="engine.hostRamSlots")
    ap.add_argument("--copies", type=int, default=3, help="extra versions+aliases per canary")
    ap.add_argument(
        "--owners-per-adapter", type=int, default=None, help="pool ownersPerAdapter (default 2)"
    )
    ap.add_argument("--keep-state", action="store_true", help="keep the temporary state folder")
    ap.add_argument(
        "--base-engine",
        action="store_true",
        help="also start a keyless twin vLLM (the pool's flags) and pass it as --engine",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `-- A -- B`: `lorafleet loadtest A`, then `lorafleet loadtest B`, on the same fleet.
    groups: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--":
            groups.append([])
        else:
            groups[-1].append(arg)
    own, commands = groups[0], groups[1:] or [[]]
    args = build_parser().parse_args(own)
    opts = FleetOptions(
        replicas=args.replicas,
        gpu_slots=args.gpu_slots,
        host_ram_slots=args.host_ram_slots,
        copies=args.copies,
        owners_per_adapter=args.owners_per_adapter,
        keep_state=args.keep_state,
    )
    try:
        with started_fleet(opts) as fleet:
            key_file = fleet.state_dir / "loadtest-api-key"
            key_file.write_text(fleet.api_key + "\n")
            key_file.chmod(0o600)
            with contextlib.ExitStack() as stack:
                engine = []
                if args.base_engine:
                    engine = ["--engine", stack.enter_context(started_base_engine(fleet))]
                target = ["--gateway", fleet.base_url, "--key-file", str(key_file),
                          "--manifests", str(fleet.manifests), *engine]  # fmt: skip
                codes = [
                    lorafleet(["loadtest", *target, *rest, "--aliases", *fleet.aliases])
                    for rest in commands
                ]
                return max(codes)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
