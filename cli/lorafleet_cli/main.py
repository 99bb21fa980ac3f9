"""`lorafleet` console script: argparse wiring only; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules with a `register(subparsers)` function, in help order. Optional ones (another
# component's, still arriving) are skipped when absent so the CLI always starts.
_COMMANDS = (
    "lorafleet_cli.cmd_up",
    "lorafleet_cli.cmd_adapter",
    "lorafleet_cli.cmd_alias",
    "lorafleet_cli.cmd_keys",
    "lorafleet_cli.cmd_status",
)
_OPTIONAL_COMMANDS = ("lorafleet_operator.cli",)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lorafleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in _COMMANDS:
        importlib.import_module(module).register(sub)
    for module in _OPTIONAL_COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        mod.register(sub)
    crds = sub.add_parser("crds", help="write crds/*.yaml from the API models")
    crds.add_argument("--out", default="crds", help="output folder (default: crds)")
    crds.set_defaults(func=_cmd_crds)
    return parser


def _cmd_crds(args: argparse.Namespace) -> int:
    from lorafleet_core.crds import write_crds

    for path in write_crds(args.out):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
