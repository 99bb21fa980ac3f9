"""`lorafleet keys list [TENANT]` and `lorafleet keys revoke TENANT KEY`.

Only key hashes exist anywhere (the plaintext is printed once by `keys create`), so keys are
named by their hash: `keys list` shows each hash's first characters, and `revoke` takes such a
prefix (at least 8 hex digits, unique within the tenant) or `-` to read the plaintext key from
stdin (kept out of shell history; hashed here and never sent anywhere).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lorafleet_cli.exit_codes import OK, CommandFailed, UsageError
from lorafleet_cli.output import NONE, Column, add_output_argument, emit
from lorafleet_cli.targets import Target, add_target_arguments, target_from_args
from lorafleet_core.api.apikeys import KEY_PREFIX, TenantKeys, hash_key
from lorafleet_core.api.names import API_KEYS_SECRET_LABEL

SHORT = len("sha256:") + 12


def _summary(keys: TenantKeys, secret: str) -> dict[str, Any]:
    return {
        "tenant": keys.tenant,
        "secret": secret,
        "keyHashes": list(keys.key_hashes),
        "requestsPerSecond": keys.requests_per_second,
        "tokensPerMinute": keys.tokens_per_minute,
        "maxConcurrentRequests": keys.max_concurrent_requests,
    }


def _limit(value: Any) -> str:
    return NONE if value is None else str(value)


COLUMNS = [
    Column("TENANT", lambda r: str(r["tenant"])),
    Column("SECRET", lambda r: str(r["secret"])),
    Column("KEYS", lambda r: str(len(r["keyHashes"]))),
    Column("HASHES", lambda r: ",".join(h[:SHORT] for h in r["keyHashes"])),
    Column("RPS", lambda r: _limit(r["requestsPerSecond"])),
    Column("TOKENS/MIN", lambda r: _limit(r["tokensPerMinute"])),
    Column("CONCURRENT", lambda r: _limit(r["maxConcurrentRequests"]), wide_only=True),
    Column("FULL HASHES", lambda r: ",".join(r["keyHashes"]), wide_only=True),
]


def tenant_keys(secrets: list[dict[str, Any]]) -> list[tuple[TenantKeys, str]]:
    out = []
    for secret in secrets:
        meta = secret.get("metadata") or {}
        if (meta.get("labels") or {}).get(API_KEYS_SECRET_LABEL) != "true":
            continue
        out.append((TenantKeys.from_secret(secret), str(meta.get("name"))))
    return sorted(out, key=lambda kv: kv[0].tenant)


def _cmd_list(args: argparse.Namespace) -> int:
    target = target_from_args(args)
    rows = [_summary(k, s) for k, s in tenant_keys(target.list("Secret"))]
    if args.tenant:
        rows = [r for r in rows if r["tenant"] == args.tenant]
        if not rows:
            raise CommandFailed(f"tenant {args.tenant!r} has no keys in {target.description}")
    emit(rows, args.output, COLUMNS)
    return OK


def matching_hash(keys: TenantKeys, key: str) -> str:
    """The stored hash `key` names: a plaintext key, a full hash or a unique hash prefix."""
    if key.startswith(KEY_PREFIX):
        wanted = hash_key(key)
        if wanted not in keys.key_hashes:
            raise CommandFailed(f"that key is not one of tenant {keys.tenant}'s keys")
        return wanted
    prefix = key if key.startswith("sha256:") else "sha256:" + key
    hex_part = prefix.removeprefix("sha256:")
    if len(hex_part) < 8 or any(c not in "0123456789abcdef" for c in hex_part):
        raise UsageError("name the key by at least 8 hex digits of its hash, or by the key")
    found = [h for h in keys.key_hashes if h.startswith(prefix)]
    if not found:
        raise CommandFailed(f"tenant {keys.tenant} has no key whose hash starts with {prefix}")
    if len(found) > 1:
        raise CommandFailed(f"{prefix} matches {len(found)} keys of {keys.tenant}; give more")
    return found[0]


def revoke(target: Target, tenant: str, key: str) -> tuple[str, int]:
    """Remove one key's hash; returns (the hash removed, keys left)."""
    secret = f"lorafleet-keys-{tenant}"
    found = target.get("Secret", secret)
    if found is None:
        raise CommandFailed(f"tenant {tenant!r} has no keys in {target.description}")
    keys = TenantKeys.from_secret(found)
    removed = matching_hash(keys, key)
    left = tuple(h for h in keys.key_hashes if h != removed)
    if not left:
        raise CommandFailed(
            f"that is tenant {tenant}'s last key: create its replacement first "
            f"(`lorafleet keys create {tenant}`), or delete Secret {secret} to lock the "
            "tenant out"
        )
    target.apply(keys.model_copy(update={"key_hashes": left}).to_secret())
    return removed, len(left)


def _cmd_revoke(args: argparse.Namespace) -> int:
    key = sys.stdin.readline().strip() if args.key == "-" else args.key
    target = target_from_args(args)
    removed, left = revoke(target, args.tenant, key)
    print(f"revoked {removed[:SHORT]}... of tenant {args.tenant}; {left} key(s) left")
    print("gateways refuse it as soon as they see the updated Secret")
    return OK


def register(sub: Any) -> None:
    """Add `list` and `revoke` to the `keys` command group."""
    ls = sub.add_parser(
        "list",
        help="tenants' keys (as hash prefixes) and rate limits",
        description="List tenants with API keys: how many, their hash prefixes (the keys "
        "themselves are never stored) and rate limit overrides.",
    )
    ls.add_argument("tenant", nargs="?", default=None, help="only this tenant")
    add_output_argument(ls)
    add_target_arguments(ls)
    ls.set_defaults(func=_cmd_list)
    rv = sub.add_parser(
        "revoke",
        help="revoke one API key of a tenant",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    rv.add_argument("tenant", help="tenant name")
    rv.add_argument("key", help="hash prefix from `lorafleet keys list`, or - to read the key")
    add_target_arguments(rv)
    rv.set_defaults(func=_cmd_revoke)
