"""`lorafleet adapter list` and `lorafleet adapter get NAME`: adapter versions and their status.

Columns are the CRD's (`kubectl get lora`): Ready, Tenant, Version, Rank, Phase, Owners, Age;
`-o wide` adds why an adapter is not Ready; `-o json|yaml` prints the objects.
"""

from __future__ import annotations

import argparse
from typing import Any

from lorafleet_cli.exit_codes import OK, CommandFailed
from lorafleet_cli.output import add_output_argument, emit, kind_columns
from lorafleet_cli.targets import add_target_arguments, target_from_args
from lorafleet_core.api import names


def _cmd_list(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    adapters = target.list(names.KIND_ADAPTER)
    if args.tenant:
        adapters = [a for a in adapters if (a.get("spec") or {}).get("tenant") == args.tenant]
    adapters.sort(key=lambda a: str(a["metadata"]["name"]))
    emit(adapters, args.output, kind_columns(names.KIND_ADAPTER))
    return OK


def _cmd_get(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    found = target.get(names.KIND_ADAPTER, args.name)
    if found is None:
        raise CommandFailed(f"LoRAAdapter {args.name!r} not found in {target.description}")
    emit(found, args.output, kind_columns(names.KIND_ADAPTER))
    return OK


def register(sub: Any) -> None:
    """Add `list` and `get` to the `adapter` command group."""
    ls = sub.add_parser(
        "list",
        help="list adapter versions with their phase and owners",
        description="List LoRAAdapters (one per adapter version) with the columns of "
        "`kubectl get lora`.",
    )
    ls.add_argument("--tenant", default=None, help="only this tenant's adapters")
    add_output_argument(ls)
    add_target_arguments(ls)
    ls.set_defaults(func=_cmd_list)
    get = sub.add_parser(
        "get",
        help="show one adapter version",
        description="Show one LoRAAdapter; -o yaml prints the whole object with its conditions.",
    )
    get.add_argument("name", help="LoRAAdapter name, e.g. acme-support-v2")
    add_output_argument(get)
    add_target_arguments(get)
    get.set_defaults(func=_cmd_get)
