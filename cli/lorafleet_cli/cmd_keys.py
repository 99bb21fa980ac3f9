"""`lorafleet keys create TENANT`: a new API key, printed once; only its hash is stored.

The key goes into the tenant's Secret (`lorafleet-keys-<tenant>`, see lorafleet_core.api.apikeys)
next to any existing hashes, so creating a second key rotates without downtime; remove the old
hash from the Secret when clients have moved.
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from lorafleet_cli import cmd_keys_manage
from lorafleet_cli.exit_codes import USAGE, fail
from lorafleet_cli.targets import Target, TargetError, add_target_arguments, target_from_args
from lorafleet_core.api.apikeys import TenantKeys, generate_key, hash_key


def create_key(
    target: Target,
    tenant: str,
    *,
    requests_per_second: float | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent_requests: int | None = None,
) -> tuple[str, str]:
    """Store a new key's hash for `tenant`; returns (plaintext key, where it was stored)."""
    key = generate_key()
    secret_name = f"lorafleet-keys-{tenant}"
    existing = target.get("Secret", secret_name)
    hashes: tuple[str, ...] = ()
    if existing is not None:
        old = TenantKeys.from_secret(existing)
        hashes = old.key_hashes
        requests_per_second = requests_per_second or old.requests_per_second
        tokens_per_minute = tokens_per_minute or old.tokens_per_minute
        max_concurrent_requests = max_concurrent_requests or old.max_concurrent_requests
    keys = TenantKeys(
        tenant=tenant,
        key_hashes=(*hashes, hash_key(key)),
        requests_per_second=requests_per_second,
        tokens_per_minute=tokens_per_minute,
        max_concurrent_requests=max_concurrent_requests,
    )
    where = target.apply(keys.to_secret())
    return key, where


def _cmd_create(args: argparse.Namespace) -> int:
    try:
        target = target_from_args(args)
        key, where = create_key(
            target,
            args.tenant,
            requests_per_second=args.requests_per_second,
            tokens_per_minute=args.tokens_per_minute,
            max_concurrent_requests=args.max_concurrent_requests,
        )
    except TargetError as exc:
        return fail(exc)
    except (ValidationError, ValueError) as exc:  # a tenant or limit that is not a valid value
        return fail(exc, USAGE)
    print(f"API key for tenant {args.tenant} (shown once, only its hash is stored in {where}):")
    print(key)
    return 0


def register(subparsers: Any) -> None:
    keys = subparsers.add_parser("keys", help="create, list and revoke tenants' API keys")
    sub = keys.add_subparsers(dest="keys_command", required=True, metavar="COMMAND")
    c = sub.add_parser("create", help="create an API key for a tenant (printed once)")
    c.add_argument("tenant", help="tenant name (a DNS label)")
    c.add_argument("--requests-per-second", type=float, default=None, help="rate limit override")
    c.add_argument("--tokens-per-minute", type=int, default=None, help="token budget override")
    c.add_argument(
        "--max-concurrent-requests",
        type=int,
        default=None,
        help="override of the requests (streams included) it may run at once per gateway pod",
    )
    add_target_arguments(c)
    c.set_defaults(func=_cmd_create)
    cmd_keys_manage.register(sub)
