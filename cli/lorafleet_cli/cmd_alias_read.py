"""`lorafleet alias list|get|history`: what each public model name serves, and its deploys.

Everything here reads the alias *status* (written by the operator on a cluster, by the
standalone reconciler beside a folder): `status.adapter` is what serves, which differs from
`spec.adapter` while a deploy is refused. `-o wide` shows the wanted adapter and why the last
deploy is refused.
"""

from __future__ import annotations

import argparse
from typing import Any

from lorafleet_cli.exit_codes import OK, CommandFailed
from lorafleet_cli.output import NONE, Column, add_output_argument, age, emit, kind_columns
from lorafleet_cli.targets import Target, add_target_arguments, target_from_args
from lorafleet_core.api import names


def with_status(target: Target, alias: dict[str, Any]) -> dict[str, Any]:
    """The alias with its status (a folder keeps status beside the manifests)."""
    if alias.get("status"):
        return alias
    status = target.alias_status(str(alias["metadata"]["name"]))
    return {**alias, "status": status.wire()} if status is not None else alias


def find(target: Target, model_or_name: str) -> dict[str, Any]:
    """An alias by public model name (tenant/name:tag) or by object name."""
    for alias in target.list(names.KIND_ALIAS):
        spec = alias.get("spec") or {}
        if model_or_name in (spec.get("model"), alias["metadata"]["name"]):
            return with_status(target, alias)
    raise CommandFailed(f"no AdapterAlias for {model_or_name!r} in {target.description}")


def _cmd_list(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    aliases = [with_status(target, a) for a in target.list(names.KIND_ALIAS)]
    if args.tenant:
        aliases = [a for a in aliases if (a.get("spec") or {}).get("tenant") == args.tenant]
    aliases.sort(key=lambda a: str((a.get("spec") or {}).get("model")))
    emit(aliases, args.output, kind_columns(names.KIND_ALIAS))
    return OK


def _cmd_get(args: argparse.Namespace) -> int:
    emit(find(target_from_args(args), args.model), args.output, kind_columns(names.KIND_ALIAS))
    return OK


HISTORY_COLUMNS = [
    Column("ADAPTER", lambda h: str(h["adapter"])),
    Column("DEPLOYED", lambda h: str(h["at"])),
    Column("AGE", lambda h: age(h["at"])),
    Column("SERVING", lambda h: "*" if h.get("serving") else ""),
]


def history(alias: dict[str, Any]) -> list[dict[str, Any]]:
    """The alias's deploys, newest first, the one serving now marked."""
    status = alias.get("status") or {}
    serving = status.get("adapter")
    out = []
    for i, entry in enumerate(status.get("history") or []):
        out.append({**entry, "serving": i == 0 and entry.get("adapter") == serving})
    return out


def _cmd_history(args: argparse.Namespace) -> int:
    alias = find(target_from_args(args), args.model)
    entries = history(alias)
    if not entries and args.output in ("table", "wide"):
        serving = (alias.get("status") or {}).get("adapter") or NONE
        print(f"no deploys recorded for {args.model} (serving {serving})")
        return OK
    emit(entries, args.output, HISTORY_COLUMNS)
    return OK


def register(sub: Any) -> None:
    """Add `list`, `get` and `history` to the `alias` command group."""
    ls = sub.add_parser(
        "list",
        help="list public model names and the adapter each serves",
        description="List AdapterAliases with the columns of `kubectl get alias`: SERVING is "
        "what the gateway serves now; -o wide adds WANTED (spec.adapter) and why a deploy is "
        "refused.",
    )
    ls.add_argument("--tenant", default=None, help="only this tenant's aliases")
    add_output_argument(ls)
    add_target_arguments(ls)
    ls.set_defaults(func=_cmd_list)
    get = sub.add_parser("get", help="show one alias and what it serves")
    get.add_argument("model", help="public model name (tenant/name:tag) or AdapterAlias name")
    add_output_argument(get)
    add_target_arguments(get)
    get.set_defaults(func=_cmd_get)
    hist = sub.add_parser(
        "history",
        help="the last deploys of an alias, newest first",
        description="The alias's recorded deploys (status.history, at most 10), newest first; "
        "`lorafleet alias rollback` returns to the one below the current.",
    )
    hist.add_argument("model", help="public model name (tenant/name:tag) or AdapterAlias name")
    add_output_argument(hist)
    add_target_arguments(hist)
    hist.set_defaults(func=_cmd_history)
