"""`lorafleet` console script: argparse wiring only; each subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lorafleet_cli.exit_codes import USAGE, CommandFailed, UsageError, fail
from lorafleet_cli.targets import TargetError
from lorafleet_core.version import version

DESCRIPTION = """\
Serve many per-customer LoRA adapters on one shared base model.

Run it on this machine with `lorafleet up` (no Kubernetes needed), or manage a cluster where
the lorafleet operator runs: publish adapter versions, point public model names at them
(deploy, roll back), issue tenants' API keys and look at the fleet. Commands act on a
standalone manifests folder when one exists (.lorafleet/manifests, or --manifests DIR) and no
cluster flag (--cluster, --kubeconfig, --context, -n) is given, else on the cluster and
namespace of your kubeconfig.
"""

EPILOG = """\
examples:
  lorafleet up                                   start a demo fleet on this machine
  lorafleet adapter push ./support --tenant acme --name support --version v2 --pool default
  lorafleet alias set acme/support:prod acme-support-v2      deploy a version
  lorafleet alias rollback acme/support:prod                 back to the previous version
  lorafleet alias list -o wide                   what serves, what was asked for, and why
  lorafleet keys create acme                     a new API key, printed once
  lorafleet status                               replicas, tiers, queues, aliases
  lorafleet loadtest --rates 2,5,10              the production trace through the gateway

exit status: 0 success, 1 the command failed (not found, refused, unreachable),
2 the command line is wrong.  Docs: docs/reference/cli.md
"""

# Command name -> the module with its `register(subparsers)` function, in help order. A run
# imports only its own command's module, so `lorafleet canary` in the control-plane image never
# imports the simulator's or the load tester's plotting libraries (they are not installed there),
# and a command starts without paying for the others. Help and errors build the whole parser.
# A command whose extra is not installed (the control-plane image has no `sim` or `loadtest`)
# is still listed, and running it says which extra to install instead of a traceback.
_COMMANDS = {
    "up": "lorafleet_cli.cmd_up",
    "adapter": "lorafleet_cli.cmd_adapter",
    "alias": "lorafleet_cli.cmd_alias",
    "keys": "lorafleet_cli.cmd_keys",
    "status": "lorafleet_cli.cmd_status",
    "sim": "lorafleet_cli.cmd_sim",
    "usage": "lorafleet_cli.cmd_usage",
    "canary": "lorafleet_cli.cmd_canary",
    "loadtest": "lorafleet_cli.cmd_loadtest",
    "operator": "lorafleet_operator.cli",
}
_EXTRA_OF_COMMAND = {"operator": "operator", "sim": "sim", "loadtest": "loadtest"}


def _register(sub: Any, name: str) -> None:
    module = _COMMANDS[name]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if name not in _EXTRA_OF_COMMAND:
            raise
        _register_missing(sub, name, _EXTRA_OF_COMMAND[name], exc.name or module)
        return
    mod.register(sub)


def _register_missing(sub: Any, name: str, extra: str, missing: str) -> None:
    hint = f"pip install 'lorafleet[{extra}]'"
    parser = sub.add_parser(name, help=f"(not installed here: {hint})", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(_args: argparse.Namespace) -> int:
        print(f"lorafleet {name} needs {missing!r}, not installed here: {hint}", file=sys.stderr)
        return 2

    parser.set_defaults(func=run)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `command` only that command's (what a run needs)."""
    parser = argparse.ArgumentParser(
        prog="lorafleet",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lorafleet {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS if command not in _COMMANDS else (command,):
        _register(sub, name)
    crds = sub.add_parser(
        "crds",
        help="write the CustomResourceDefinitions (crds/*.yaml) for kubectl apply",
        description="Writes the CRDs generated from the pydantic models, one file per kind "
        "(the files in crds/ and charts/lorafleet/crds/). The Helm chart installs them; "
        "`kubectl apply -f DIR` installs them without it.",
    )
    crds.add_argument("--out", default="crds", help="output folder (default: crds)")
    crds.set_defaults(func=_cmd_crds)
    check = sub.add_parser(
        "validate",
        help="check manifests against the CRD schemas and CEL rules, offline",
        description="Validates every lorafleet object in the YAML files as the API server "
        "would on create (schema, defaults, CEL rules); other kinds are skipped. Exit 1 with "
        "one line per problem.",
    )
    check.add_argument("files", nargs="+", type=Path, help="YAML files (multi-document allowed)")
    check.set_defaults(func=_cmd_validate)
    return parser


def _cmd_crds(args: argparse.Namespace) -> int:
    from lorafleet_core.api.crds import write_crds

    for path in write_crds(args.out):
        print(path)
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from lorafleet_core.api.crd_resources import RESOURCES
    from lorafleet_core.api.crd_validation import schema_of, validate
    from lorafleet_core.storage.manifests import load_file  # the one manifest reader

    kinds = {r.kind for r in RESOURCES}
    problems: list[str] = []
    for path in args.files:
        loaded = load_file(path)
        problems += [f"{path}: cannot read: {e.message}" for e in loaded.errors]
        for obj in loaded.objects:
            if obj.kind in kinds:
                label = f"{obj.kind}/{obj.name or '?'}"
                problems += [
                    f"{path}: {label}: {e}" for e in validate(schema_of(obj.kind), obj.body)
                ]
    for line in problems:
        print(line)
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(given[0] if given else None).parse_args(given)
    args.cli_argv = given  # what results record
    try:
        rc: int = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        return fail(exc, USAGE)
    except (CommandFailed, TargetError) as exc:
        return fail(exc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
