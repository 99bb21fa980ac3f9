"""`lorafleet alias set MODEL ADAPTER` (deploy) and `lorafleet alias rollback MODEL`.

An alias maps a public model name `tenant/name:tag` to one immutable LoRAAdapter. Setting it
is a deploy: the CLI writes only `spec.adapter` (the manifest). The reconciler is the one writer
of status (the operator on a cluster, `lorafleet up` for a folder): it moves `status.adapter`,
the version actually served, only once the target is Ready, so a deploy to a Failed or Rejected
adapter keeps the old version serving with a `Deployed=False` condition saying why. Rollback
points spec.adapter back at `status.previousAdapter`.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from pydantic import ValidationError

from lorafleet_cli import alias_wait, cmd_alias_read
from lorafleet_cli.exit_codes import FAILURE, USAGE, UsageError, fail
from lorafleet_cli.targets import Target, TargetError, add_target_arguments, target_from_args
from lorafleet_core import names
from lorafleet_core.models import AdapterAlias, AdapterAliasSpec, ObjectMeta, ReplicaPool
from lorafleet_core.planning.adapters import Validation, parse_adapter, validate_adapter


class AliasError(RuntimeError):
    pass


class InvalidAlias(AliasError, UsageError):
    """The model name or adapter name given is not a valid value (exit 2)."""


def alias_object_name(model: str) -> str:
    """`acme/support:prod` -> `acme-support-prod` (the AdapterAlias's metadata.name)."""
    return re.sub(r"[^a-z0-9.-]+", "-", model.lower()).strip("-.")[:253]


def find_alias(target: Target, model: str) -> dict[str, Any] | None:
    """The alias object for `model`, whatever its file or object name."""
    by_name = target.get(names.KIND_ALIAS, alias_object_name(model))
    if by_name is not None and (by_name.get("spec") or {}).get("model") == model:
        return by_name
    for obj in target.list(names.KIND_ALIAS):
        if (obj.get("spec") or {}).get("model") == model:
            return obj
    return None


def _check_servable(target: Target, adapter: str, found: dict[str, Any]) -> None:
    """Refuse a deploy the operator would refuse: the adapter must pass pool validation.

    The operator's own validator decides, so the alias (and its recorded rollback target)
    never points at an adapter no replica will load.
    """
    parsed = parse_adapter(found)
    if isinstance(parsed, Validation):
        raise AliasError(f"LoRAAdapter {adapter!r} is invalid: {parsed.message}")
    pools = []
    for raw in target.list(names.KIND_POOL):
        try:
            pools.append(ReplicaPool.model_validate({**raw, "status": None}))
        except ValidationError:
            continue  # an invalid pool serves nothing; the reconciler reports it
    verdict = validate_adapter(parsed.spec, pools)
    if verdict.final:
        raise AliasError(
            f"LoRAAdapter {adapter!r} cannot be served ({verdict.reason}): {verdict.message}"
        )


def set_alias(target: Target, model: str, adapter: str) -> tuple[str, str | None]:
    """Point `model` at `adapter`; returns (alias object name, adapter served before)."""
    tenant = model.split("/", 1)[0]
    try:
        AdapterAliasSpec(model=model, tenant=tenant, adapter=adapter)
    except ValidationError as exc:
        raise InvalidAlias(f"invalid alias: {exc.errors()[0]['msg']}") from exc
    found = target.get(names.KIND_ADAPTER, adapter)
    if found is None:
        raise AliasError(f"LoRAAdapter {adapter!r} not found in {target.description}")
    owner = (found.get("spec") or {}).get("tenant")
    if owner != tenant:
        raise AliasError(
            f"LoRAAdapter {adapter!r} belongs to tenant {owner!r}; {model!r} can only serve "
            f"adapters of tenant {tenant!r}"
        )
    phase = (found.get("status") or {}).get("phase")
    if phase == "Rejected":
        raise AliasError(f"LoRAAdapter {adapter!r} was rejected by the operator; see its status")
    _check_servable(target, adapter, found)

    existing = find_alias(target, model)
    previous = str((existing.get("spec") or {}).get("adapter")) if existing else None
    if existing is not None:
        body = dict(existing)
        body["spec"] = {**existing["spec"], "adapter": adapter}
        body.pop("status", None)  # status belongs to the operator, never to an apply
        meta = dict(body.get("metadata") or {})
        for server_field in ("resourceVersion", "uid", "generation", "managedFields"):
            meta.pop(server_field, None)
        body["metadata"] = meta
        name = str(meta["name"])
    else:
        name = alias_object_name(model)
        body = AdapterAlias(
            metadata=ObjectMeta(name=name, labels={names.LABEL_TENANT: tenant}),
            spec=AdapterAliasSpec(model=model, tenant=tenant, adapter=adapter),
        ).wire()
    target.apply(body)
    return name, previous


def rollback(target: Target, model: str) -> tuple[str, str]:
    """Point `model` back at its previous adapter; returns (from, to)."""
    existing = find_alias(target, model)
    if existing is None:
        raise AliasError(f"no alias for {model!r} in {target.description}")
    name = str(existing["metadata"]["name"])
    status = target.alias_status(name)
    previous = status.previous_adapter if status else None
    if not previous:
        raise AliasError(
            f"{model!r} has no previous adapter to roll back to (none recorded in its status; "
            "the reconciler records one when it deploys a second version)"
        )
    current = str(existing["spec"]["adapter"])
    set_alias(target, model, previous)
    return current, previous


def _cmd_set(args: argparse.Namespace) -> int:
    try:
        target = target_from_args(args)
        name, previous = set_alias(target, args.model, args.adapter)
    except (AliasError, TargetError) as exc:
        return fail(exc, USAGE if isinstance(exc, UsageError) else FAILURE)
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
        return fail(exc, USAGE if isinstance(exc, UsageError) else FAILURE)
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
