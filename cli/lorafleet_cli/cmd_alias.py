"""`lorafleet alias set MODEL ADAPTER` (deploy) and `lorafleet alias rollback MODEL`.

An alias maps a public model name `tenant/name:tag` to one immutable LoRAAdapter. Setting it
is a deploy: the CLI writes only `spec.adapter` (the manifest). The reconciler is the one writer
of status (the operator on a cluster, `lorafleet up` for a folder): it moves `status.adapter`,
the version actually served, only once the target is Ready, so a deploy to a Failed or Rejected
adapter keeps the old version serving with a `Deployed=False` condition saying why. Rollback
points spec.adapter back at `status.previousAdapter`. The decisions live in
lorafleet_core.planning.alias_deploy, shared with the control API; this module reads and applies.
"""

from __future__ import annotations

import argparse
from typing import Any

from lorafleet_cli import alias_wait, cmd_alias_read
from lorafleet_cli.exit_codes import FAILURE, USAGE, UsageError, fail
from lorafleet_cli.targets import Target, TargetError, add_target_arguments, target_from_args
from lorafleet_core.api import names
from lorafleet_core.planning.alias_deploy import (
    AliasError,
    InvalidAlias,
    alias_object_name,
    pick_alias,
    plan_set,
    rollback_target,
)
from lorafleet_core.storage.swap import SWAP_TRIES, WriteConflict, retry_swaps

__all__ = ["AliasError", "InvalidAlias", "alias_object_name", "find_alias", "rollback", "set_alias"]


def find_alias(target: Target, model: str) -> dict[str, Any] | None:
    """The alias object for `model`, whatever its file or object name."""
    by_name = target.get(names.KIND_ALIAS, alias_object_name(model))
    if by_name is not None and (by_name.get("spec") or {}).get("model") == model:
        return by_name
    found = pick_alias(model, None, target.list(names.KIND_ALIAS))
    return dict(found) if found is not None else None


def set_alias(target: Target, model: str, adapter: str) -> tuple[str, str | None]:
    """Point `model` at `adapter`; returns (alias object name, adapter it named right before).

    Written only over the version read (a create when there was none), read and decided again
    when another writer got there first, so the previous adapter reported is the true one."""

    def deploy() -> tuple[str, str | None]:
        with target.writing() as swap:
            # The alias is read last: the shorter the time from its read to the swap, the less
            # often a racing writer makes the swap fail.
            found = target.get(names.KIND_ADAPTER, adapter)
            pools = target.list(names.KIND_POOL)
            occupant = target.get(names.KIND_ALIAS, alias_object_name(model))
            existing = find_alias(target, model)
            body, previous = plan_set(
                model,
                adapter,
                found=found,
                pools=pools,
                existing=existing,
                occupant=occupant,
                where=target.description,
            )
            swap(body, existing)
        return str(body["metadata"]["name"]), previous

    try:
        return retry_swaps(deploy)
    except WriteConflict as exc:
        raise AliasError(
            f"the alias for {model!r} kept changing meanwhile ({SWAP_TRIES} tries): {exc}; "
            "try again"
        ) from exc


def rollback(target: Target, model: str) -> tuple[str, str]:
    """Point `model` back at its previous adapter; returns (from, to)."""
    existing = find_alias(target, model)
    status = target.alias_status(str(existing["metadata"]["name"])) if existing else None
    previous = rollback_target(
        model, existing, status.previous_adapter if status else None, target.description
    )
    assert existing is not None
    _, current = set_alias(target, model, previous)  # what it named right before the write
    return current or previous, previous


def _exit_code(exc: Exception) -> int:
    return USAGE if isinstance(exc, InvalidAlias | UsageError) else FAILURE


def _cmd_set(args: argparse.Namespace) -> int:
    try:
        target = target_from_args(args)
        name, previous = set_alias(target, args.model, args.adapter)
    except (AliasError, TargetError) as exc:
        return fail(exc, _exit_code(exc))
    was = f" (was {previous})" if previous and previous != args.adapter else ""
    print(f"{args.model} -> {args.adapter}{was}  [AdapterAlias {name}, {target.description}]")
    if args.wait:
        alias_wait.wait_until_served(target, name, args.adapter, args.timeout)
        print(f"{args.model} serves {args.adapter}")
    return 0


def _cmd_rollback(args: argparse.Namespace) -> int:
    try:
        target = target_from_args(args)
        current, previous = rollback(target, args.model)
    except (AliasError, TargetError) as exc:
        return fail(exc, _exit_code(exc))
    print(f"{args.model} rolled back: {current} -> {previous}")
    if args.wait:
        name = str((find_alias(target, args.model) or {}).get("metadata", {}).get("name"))
        alias_wait.wait_until_served(target, name, previous, args.timeout)
        print(f"{args.model} serves {previous}")
    return 0


def _add_wait_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", action="store_true", help="return once the alias serves it (exit 1 if refused)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=alias_wait.DEFAULT_TIMEOUT_S,
        help="seconds --wait waits (default: %(default)g)",
    )


def register(subparsers: Any) -> None:
    alias = subparsers.add_parser(
        "alias", help="deploy, roll back and inspect public model names (AdapterAlias objects)"
    )
    sub = alias.add_subparsers(dest="alias_command", required=True, metavar="COMMAND")
    s = sub.add_parser("set", help="point a model name at an adapter version (deploy)")
    s.add_argument("model", help="public model name, tenant/name:tag")
    s.add_argument("adapter", help="LoRAAdapter name (an immutable version)")
    _add_wait_arguments(s)
    add_target_arguments(s)
    s.set_defaults(func=_cmd_set)
    r = sub.add_parser("rollback", help="point a model name back at its previous adapter")
    r.add_argument("model", help="public model name, tenant/name:tag")
    _add_wait_arguments(r)
    add_target_arguments(r)
    r.set_defaults(func=_cmd_rollback)
    cmd_alias_read.register(sub)
