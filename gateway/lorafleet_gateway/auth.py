"""API key → tenant. Only key hashes are held; the match is constant-time (see KeyIndex)."""

from __future__ import annotations

from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_gateway.errors import APIError

_BEARER = "bearer "


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    if not authorization or len(authorization) <= len(_BEARER):
        return None
    if authorization[: len(_BEARER)].lower() != _BEARER:
        return None
    token = authorization[len(_BEARER) :].strip()
    return token or None


def single_authorization(values: list[str]) -> str | None:
    """The request's one Authorization header (None when absent); two or more are a 400.

    Authorization is not a list header, so two of them make a malformed request. Taking one
    (the first, as a dictionary lookup would) lets a proxy in front check or log one key while
    the gateway serves another tenant's."""
    if len(values) > 1:
        raise APIError(
            400,
            f"The request has {len(values)} Authorization headers: send exactly one.",
            code="duplicate_authorization",
        )
    return values[0] if values else None


def authenticate(keys: KeyIndex, authorization: str | None) -> TenantKeys:
    """The tenant of the request's key; raises a 401 APIError for a missing or unknown key."""
    token = bearer_token(authorization)
    if token is None:
        raise APIError(
            401,
            "You didn't provide an API key. Send it as `Authorization: Bearer <key>`.",
            code="missing_api_key",
        )
    tenant = keys.tenant_for(token)
    if tenant is None:
        # Never echo the presented key (OpenAI echoes a masked one; we echo nothing).
        raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
    return tenant
