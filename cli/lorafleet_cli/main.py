"""`lorafleet` console script: subcommands are registered by their modules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lorafleet", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    crds = sub.add_parser("crds", help="write crds/*.yaml from the API models")
    crds.add_argument("--out", default="crds", help="output folder (default: crds)")
    crds.set_defaults(func=_cmd_crds)
    return parser


def _cmd_crds(args: argparse.Namespace) -> int:
    from lorafleet_api.crds import write_crds

    for path in write_crds(args.out):
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
