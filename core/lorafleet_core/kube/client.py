"""How every lorafleet component talks to Kubernetes: kubernetes_asyncio, configured one way.

One client library for everything: the operator's writes (kopf watches and patches the objects
it handles through its own API access, logged in with the same credentials, see
`kopf_connection`), the gateway's catalog watches and the CLI's cluster target. Credentials come
from the usual places, in this order: an explicit API server (tests, dev), the pod's service
account, the kubeconfig. The library handles kubeconfig details (embedded certificates, exec
plugins, token refresh); nothing here writes key material to disk itself.

Patch strategies, chosen for what a real API server accepts and means (never for what the test
emulator happens to support):

- custom resources and their `/status`: JSON merge patch (`MERGE_PATCH`); CRDs accept no
  strategic merge patch, and kubernetes_asyncio's default for a dict body on a custom object is
  a JSON *patch* content type, so the type is always passed explicitly;
- built-in objects the operator only touches (a pod's annotation, a StatefulSet's replica
  count): strategic merge patch (`STRATEGIC_MERGE_PATCH`, what kubectl uses for built-ins);
- built-in objects the operator renders whole (StatefulSet, Service, PodDisruptionBudget):
  created when missing, else a JSON merge patch of the whole rendered object. RFC 7386 is what
  "this is the object" means: lists are replaced whole and a null removes a field (the pool
  planner renders fields taken out of `spec.template` as null). A strategic merge patch would
  merge lists by key and keep a removed toleration or env var; server-side apply would need
  every write, the first included, to be an apply, and drops nulls instead of removing.

Every write names `FIELD_MANAGER`. kmock (the emulator the tests use) applies every PATCH body
as a JSON merge patch whatever its content type: see docs/reference/operator.md, "Testing".
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "lorafleet-operator"


class KubeConfigError(RuntimeError):
    """No usable credentials were found; the message says where it looked."""


async def load_configuration(
    *,
    api_server: str | None = None,
    token: str | None = None,
    insecure: bool = False,
    kubeconfig: str | None = None,
    context: str | None = None,
    kubeconfig_first: bool = False,
) -> client.Configuration:
    """Connection settings: explicit server, else in-cluster, else kubeconfig.

    Services (operator, gateway) run in pods, so the service account comes first; the CLI
    passes `kubeconfig_first`, as kubectl prefers your kubeconfig and falls back to the pod's
    account. Naming a kubeconfig or a context means the kubeconfig, always.
    """
    cfg = client.Configuration()
    if api_server:
        cfg.host = api_server.rstrip("/")
        cfg.verify_ssl = not insecure
        if token:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cfg
    explicit = kubeconfig is not None or context is not None
    attempts = (
        [_from_kubeconfig, _in_cluster] if kubeconfig_first else [_in_cluster, _from_kubeconfig]
    )
    if explicit:
        attempts = [_from_kubeconfig]
    problems = []
    for attempt in attempts:
        try:
            await attempt(cfg, kubeconfig, context)
            return cfg
        except (config.ConfigException, OSError, TypeError) as exc:
            problems.append(str(exc))
    where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    msg = f"no service account and no usable kubeconfig ({where}): {'; '.join(problems)}"
    raise KubeConfigError(msg)


async def _in_cluster(cfg: client.Configuration, _kubeconfig: str | None, _ctx: str | None) -> None:
    config.load_incluster_config(client_configuration=cfg)


async def _from_kubeconfig(
    cfg: client.Configuration, kubeconfig: str | None, context: str | None
) -> None:
    await config.load_kube_config(
        config_file=_kubeconfig_path(kubeconfig), context=context, client_configuration=cfg
    )


def _kubeconfig_path(kubeconfig: str | None) -> str | None:
    # Read $KUBECONFIG now: the library reads it once, at import.
    return kubeconfig or os.environ.get("KUBECONFIG") or None


def kubeconfig_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig's (or `context`'s) context; "default" when it has none."""
    try:
        contexts, active = config.list_kube_config_contexts(
            config_file=_kubeconfig_path(kubeconfig)
        )
    except (config.ConfigException, OSError, TypeError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else active
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


def bearer_token(cfg: client.Configuration) -> tuple[str | None, str | None]:
    """(scheme, token) of the configuration's bearer token, split as kopf wants them."""
    raw = cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization")
    if not raw:
        return None, None
    prefix = cfg.api_key_prefix.get("BearerToken")
    if prefix:
        return str(prefix), str(raw)
    scheme, _, token = str(raw).partition(" ")
    return (scheme, token) if token else ("Bearer", scheme)


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 404


def is_conflict(exc: BaseException) -> bool:
    return isinstance(exc, ApiException) and exc.status == 409


def plain(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    """A typed client object (V1Pod, ...) as the JSON dict the API server sent."""
    if isinstance(obj, dict):
        return obj
    out: dict[str, Any] = api.sanitize_for_serialization(obj)
    return out
