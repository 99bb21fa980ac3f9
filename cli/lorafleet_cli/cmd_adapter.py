"""`lorafleet adapter push DIR --tenant T --name N --version V --pool P`.

Inspects a PEFT LoRA folder (rank, target modules, tensor shapes), refuses what the pool would
reject *before* uploading anything, computes the checksum, uploads the two adapter files to the
object store and writes the LoRAAdapter (a folder target deploys it at once to a running
`lorafleet up`; a cluster target applies it for the operator).

The LoRAAdapter's name is `<tenant>-<name>-<version>`: one immutable object per version, so a
deploy is an alias change and a rollback points the alias back.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lorafleet_cli import cmd_adapter_read
from lorafleet_cli.exit_codes import UsageError, fail
from lorafleet_cli.targets import Target, TargetError, add_target_arguments, target_from_args
from lorafleet_core.api import names
from lorafleet_core.api.adapter_manifest import adapter_object_name, build_adapter
from lorafleet_core.api.models import (
    ADAPTER_NAME,
    LoRAAdapterSpec,
    ReplicaPool,
)
from lorafleet_core.planning.adapters import validate_adapter
from lorafleet_core.planning.base_model import base_model_source
from lorafleet_core.storage import objectstore
from lorafleet_core.storage.adapter_files import (
    AdapterFormatError,
    AdapterInfo,
    BaseModelDims,
    adapter_checksum,
    check_shapes,
    inspect_adapter,
)


class PushRefused(RuntimeError):
    """The adapter cannot be served by the pool; the message lists every reason."""


def local_model_dir(uri: str) -> Path | None:
    """The base model folder when the pool's baseModel.uri is on this machine."""
    local = base_model_source(uri).local_dir
    if local is None or not (Path(local) / "config.json").is_file():
        return None
    return Path(local)


def pool_problems(
    spec: LoRAAdapterSpec, info: AdapterInfo, pool: ReplicaPool, dims: BaseModelDims | None
) -> list[str]:
    """Every reason the operator (or the pool's replicas) would refuse this adapter.

    The operator's own validation planner decides base model, rank and modules, so `push`
    refuses exactly what a cluster would reject; tensor shapes are checked here against the
    base model's config (the replicas check them again before vLLM sees the files).
    """
    problems = []
    verdict = validate_adapter(spec, [pool])
    if not verdict.ok:
        problems.append(f"{verdict.reason}: {verdict.message}")
    if not info.target_modules:
        problems.append("adapter_config.json names no target_modules")
    if dims is not None:
        problems.extend(check_shapes(info, dims).problems)
    return problems


def push(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """Validate, upload and apply; returns the object written. Raises PushRefused."""
    folder: Path = args.dir
    if not re.fullmatch(ADAPTER_NAME, args.name):
        # It becomes the public model name tenant/NAME:tag, a folder and a label value: a
        # space, a capital or 64 characters pushed fine and then no alias could name it.
        raise UsageError(
            f"--name {args.name!r} must be 1-63 lower-case letters, digits, '-', '.' or '_', "
            "starting and ending with a letter or digit (it is the middle of the public "
            "model name tenant/NAME:tag)"
        )
    try:
        info = inspect_adapter(folder)
    except AdapterFormatError as exc:
        raise PushRefused(f"{folder} is not a PEFT LoRA adapter: {exc}") from exc
    pool_obj = target.get(names.KIND_POOL, args.pool)
    if pool_obj is None:
        raise PushRefused(f"ReplicaPool {args.pool!r} not found in {target.description}")
    try:
        pool = ReplicaPool.model_validate({**pool_obj, "status": None})
    except ValidationError as exc:
        raise PushRefused(f"ReplicaPool {args.pool!r} is invalid: {exc}") from exc

    object_name = adapter_object_name(args.tenant, args.name, args.version)
    checksum = adapter_checksum(folder)
    store = objectstore.parse_store_uri(args.store or objectstore.default_store(args.state_dir))
    dest = store.child(args.tenant, args.name, args.version)
    try:
        adapter = build_adapter(
            object_name=object_name,
            tenant=args.tenant,
            version=args.version,
            rank=info.rank,
            alpha=info.alpha,
            target_modules=info.target_modules,
            size_bytes=info.size_bytes,
            base_hash=args.base_model_hash or pool.spec.base_model.hash,
            weights_uri=str(dest),  # where it will be: the pool's adapterSources judge it
            checksum=checksum,
            adapter_name=args.name,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        field = {"tenant": "--tenant", "version": "--version"}.get(str(first["loc"][-1]))
        if field is not None:  # a value on the command line: exit 2
            raise UsageError(f"{field} {getattr(args, field[2:])!r}: {first['msg']}") from exc
        where = ".".join(str(p) for p in first["loc"])
        raise PushRefused(f"invalid adapter: {where}: {first['msg']}") from exc
    model_dir = args.base_model or local_model_dir(pool.spec.base_model.uri)
    dims = BaseModelDims.from_model_dir(model_dir) if model_dir else None
    problems = pool_problems(adapter.spec, info, pool, dims)
    if problems:
        raise PushRefused(
            f"pool {args.pool!r} would reject {folder}:\n" + "\n".join(f"  - {p}" for p in problems)
        )
    if dims is None:
        print(
            "note: the pool's base model is not on this machine; tensor shapes are checked "
            "by the replicas (pass --base-model DIR to check them now)",
            file=sys.stderr,
        )

    existing = target.get(names.KIND_ADAPTER, object_name)
    if existing is not None and (existing.get("spec") or {}).get("checksum") != checksum:
        raise PushRefused(
            f"LoRAAdapter {object_name} already exists with other weights; versions are "
            "immutable: push a new --version"
        )
    # The store may be shared with other targets (another namespace, a standalone folder):
    # files another LoRAAdapter verifies by checksum must never change under it.
    held = objectstore.stored_checksum(dest, endpoint_url=args.s3_endpoint_url)
    if held is not None and held != checksum:
        raise PushRefused(
            f"{dest} already holds other weights ({held}); versions are immutable: push a "
            "new --version"
        )
    if held == checksum:
        weights_uri = str(dest)  # already there, byte for byte
    else:
        weights_uri = objectstore.upload_adapter(
            folder, dest, endpoint_url=args.s3_endpoint_url, progress=not args.quiet
        )
    adapter.spec.weights_uri = weights_uri
    body = adapter.wire()
    where = target.apply(body)
    print(f"LoRAAdapter {object_name} written to {where}")
    print(
        f"  rank {info.rank}, modules {','.join(info.target_modules)}, {info.size_bytes} bytes, "
        f"{checksum}"
    )
    print(f"deploy it: lorafleet alias set {args.tenant}/{args.name}:prod {object_name}")
    return body


def _cmd_push(args: argparse.Namespace) -> int:
    try:
        target = target_from_args(args)
        body = push(args, target)
    except (PushRefused, TargetError, objectstore.StoreError) as exc:
        return fail(exc)
    if args.json:
        print(json.dumps(body, indent=2))
    return 0


def register(subparsers: Any) -> None:
    adapter = subparsers.add_parser(
        "adapter", help="publish and list adapter versions (LoRAAdapter objects)"
    )
    sub = adapter.add_subparsers(dest="adapter_command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "push",
        help="inspect, upload and register a PEFT LoRA folder as a new adapter version",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", type=Path, help="PEFT folder (adapter_config.json + safetensors)")
    p.add_argument("--tenant", required=True, help="tenant (customer) owning the adapter")
    p.add_argument("--name", required=True, help="adapter name within the tenant, e.g. support")
    p.add_argument("--version", required=True, help="version label, e.g. v2")
    p.add_argument("--pool", required=True, help="ReplicaPool that will serve it")
    p.add_argument(
        "--store",
        default=None,
        help="object store: s3://bucket/prefix or file:///path "
        "(default: file://<state-dir>/objectstore)",
    )
    p.add_argument("--s3-endpoint-url", default=None, help="S3 endpoint (MinIO, moto, ...)")
    p.add_argument(
        "--base-model",
        type=Path,
        default=None,
        help="base model folder to check tensor shapes against (default: the pool's, if local)",
    )
    p.add_argument(
        "--base-model-hash",
        default=None,
        help="sha256:<hex> of the model the adapter was trained on; refused if not the pool's",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the LoRAAdapter written")
    add_target_arguments(p)
    p.set_defaults(func=_cmd_push)
    cmd_adapter_read.register(sub)
