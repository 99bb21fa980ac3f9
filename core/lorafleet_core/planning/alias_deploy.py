"""Deploy and rollback of an alias, decided once for every writer of `AdapterAlias.spec`.

The CLI (`lorafleet alias set|rollback`) and the control API (`PUT /internal/aliases/{alias}`)
both point a public model name at an adapter version. They read the objects their own way (a
folder, the cluster through a sync or an async client) and hand them here; these pure
functions refuse what the operator would refuse and return the body to write, which they write
only over the version they read (lorafleet_core.storage.swap), deciding again if it changed
meanwhile. The reconciler
(operator, or `lorafleet up`) stays the one writer of alias status: it moves `status.adapter`
only once the target is Ready.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api import names
from lorafleet_core.api.models import AdapterAlias, AdapterAliasSpec, ObjectMeta
from lorafleet_core.planning.adapters import (
    Validation,
    parse_adapter,
    parse_pools,
    validate_adapter,
)

Obj = Mapping[str, Any]


class AliasError(RuntimeError):
    """The deploy or rollback cannot be done; the message says why."""


class InvalidAlias(AliasError):
    """The model name or adapter name given is not a valid value."""


class AdapterNotFound(AliasError):
    """The adapter named does not exist."""


class AliasNameTaken(AliasError):
    """The object name the model maps to holds another model's alias; writing would take it."""


# A run of the characters a public model name may hold besides [a-z0-9]: `/`, `:`, `-`, `.`, `_`.
_SYMBOLS = re.compile(r"[^a-z0-9]+")
DIGEST_HEX = 16  # 64 bits: finding another name with the same digest is out of reach


def alias_object_name(model: str) -> str:
    """The AdapterAlias's metadata.name for a public model name; distinct models, distinct names.

    `tenant/name:tag` whose name and tag hold only [a-z0-9] and single dots becomes
    `tenant-name-tag` (`acme/support:prod` -> `acme-support-prod`, `acme/v1.2:prod` ->
    `acme-v1.2-prod`): exactly two hyphens, so the model can be read back from it. Any other
    model (a `-`, `_` or a run of separators in it) would be ambiguous that way (`a/b-c:d` and
    `a-b/c:d`, `acme/x_y:z` and `acme/x-y:z`), so it becomes its separators as hyphens plus
    `-` and 16 hex of a hash of the whole model (`acme/x_y:z` -> `acme-x-y-z-<hex>`): at least
    four hyphens, so never a readable name, and distinct from every other hashed name unless
    blake2b collides (the writers refuse then; they never take over another model's object).
    Every result is a DNS-1123 subdomain of at most 208 characters (the model is at most 191).
    """
    # In a valid model `/` and `:` are runs of their own (every part starts and ends with
    # [a-z0-9]); a lone `.` is the only other separator that reads back unambiguously.
    if all(run in ("/", ":", ".") for run in _SYMBOLS.findall(model)):
        return model.replace("/", "-").replace(":", "-")
    readable = _SYMBOLS.sub(lambda m: "." if m.group() == "." else "-", model)
    digest = hashlib.blake2b(model.encode(), digest_size=DIGEST_HEX // 2).hexdigest()
    return f"{readable}-{digest}"


def pick_alias(model: str, by_name: Obj | None, all_aliases: Iterable[Obj]) -> Obj | None:
    """The alias object serving `model`: the one named after it, else any whose spec names it."""
    if by_name is not None and (by_name.get("spec") or {}).get("model") == model:
        return by_name
    for obj in all_aliases:
        if (obj.get("spec") or {}).get("model") == model:
            return obj
    return None


def _check_servable(adapter: str, found: Obj, pools: Iterable[Obj]) -> None:
    """Refuse a deploy the operator would refuse: the adapter must pass pool validation.

    The operator's own validator decides, so the alias (and its recorded rollback target)
    never points at an adapter no replica will load.
    """
    parsed = parse_adapter(found)
    if isinstance(parsed, Validation):
        raise AliasError(f"LoRAAdapter {adapter!r} is invalid: {parsed.message}")
    valid_pools = parse_pools(pools)
    verdict = validate_adapter(parsed.spec, valid_pools)
    if verdict.final:
        raise AliasError(
            f"LoRAAdapter {adapter!r} cannot be served ({verdict.reason}): {verdict.message}"
        )


def plan_set(
    model: str,
    adapter: str,
    *,
    found: Obj | None,
    pools: Iterable[Obj],
    existing: Obj | None,
    occupant: Obj | None,
    where: str,
) -> tuple[dict[str, Any], str | None]:
    """The AdapterAlias body pointing `model` at `adapter`, and the adapter it named before.

    `found` is the LoRAAdapter named `adapter` (None: absent), `existing` the alias serving
    `model` (see `pick_alias`), `occupant` the alias object named `alias_object_name(model)`
    (None: absent), `where` the target's description for messages. Raises AliasError
    (InvalidAlias, AdapterNotFound, AliasNameTaken) for what must not be written.
    """
    tenant = model.split("/", 1)[0]
    try:
        AdapterAliasSpec(model=model, tenant=tenant, adapter=adapter)
    except ValidationError as exc:
        raise InvalidAlias(f"invalid alias: {exc.errors()[0]['msg']}") from exc
    if found is None:
        raise AdapterNotFound(f"LoRAAdapter {adapter!r} not found in {where}")
    owner = (found.get("spec") or {}).get("tenant")
    if owner != tenant:
        raise AliasError(
            f"LoRAAdapter {adapter!r} belongs to tenant {owner!r}; {model!r} can only serve "
            f"adapters of tenant {tenant!r}"
        )
    phase = (found.get("status") or {}).get("phase")
    if phase == "Rejected":
        raise AliasError(f"LoRAAdapter {adapter!r} was rejected by the operator; see its status")
    if phase == "Failed":
        # The replicas refused its files (checksum, base model, shapes): the operator would
        # never serve it, and the deploy must not look accepted.
        raise AliasError(
            f"LoRAAdapter {adapter!r} is Failed: every replica that owns it refused its files; "
            "see its status (publish the fix as a new version)"
        )
    _check_servable(adapter, found, pools)

    name = alias_object_name(model)
    if existing is None and occupant is not None:
        # Another model's alias (written by hand, or named by an older rule) holds the name:
        # an apply would rewrite its spec and take its status, so refuse instead.
        other = (occupant.get("spec") or {}).get("model")
        raise AliasNameTaken(
            f"AdapterAlias {name!r} in {where} already serves model {other!r}; {model!r} "
            "cannot be created under that name (rename or delete that object first)"
        )

    previous = str((existing.get("spec") or {}).get("adapter")) if existing else None
    if existing is not None:
        body = dict(existing)
        spec = {**existing["spec"], "adapter": adapter}
        split = spec.get("split")
        if isinstance(split, list):
            # Setting the alias to a version of its split promotes it: that entry goes (the
            # spec would be refused with it), the other versions keep their share.
            kept = [
                s for s in split if not (isinstance(s, Mapping) and s.get("adapter") == adapter)
            ]
            if kept:
                spec["split"] = kept
            else:
                spec.pop("split")
        body["spec"] = spec
        body.pop("status", None)  # status belongs to the reconciler, never to an apply
        meta = dict(body.get("metadata") or {})
        for server_field in ("resourceVersion", "uid", "generation", "managedFields"):
            meta.pop(server_field, None)
        body["metadata"] = meta
        return body, previous
    body = AdapterAlias(
        metadata=ObjectMeta(name=name, labels={names.LABEL_TENANT: tenant}),
        spec=AdapterAliasSpec(model=model, tenant=tenant, adapter=adapter),
    ).wire()
    return body, previous


def rollback_target(model: str, existing: Obj | None, previous: str | None, where: str) -> str:
    """The adapter a rollback of `model` points back at: the status's previousAdapter."""
    if existing is None:
        raise AliasError(f"no alias for {model!r} in {where}")
    if not previous:
        raise AliasError(
            f"{model!r} has no previous adapter to roll back to (none recorded in its status; "
            "the reconciler records one when it deploys a second version)"
        )
    return previous
