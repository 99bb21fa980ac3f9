"""Operator start-up, login and clean-up."""

from __future__ import annotations

import logging
from typing import Any

import kopf
from kubernetes_asyncio.client import Configuration

from lorafleet_core.api.names import FINALIZER, GROUP
from lorafleet_core.kube.client import bearer_token, load_configuration
from lorafleet_operator import runtime
from lorafleet_operator.kube import HOLDER
from lorafleet_operator.settings import OperatorSettings


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    runtime.reset()
    runtime.runtime().serve_metrics()
    runtime.runtime().serve_control()
    runtime.runtime().check_crds()
    # Our own finalizer and annotation prefix, and no `status.kopf`: the CRD schemas do not
    # declare it, so a real API server would prune it anyway.
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300


@kopf.on.login()
async def login(**_: Any) -> kopf.ConnectionInfo:
    """Explicit API server from settings (tests, dev), else in-cluster, else kubeconfig.

    kubernetes_asyncio loads the credentials (lorafleet_core.kube.client, as the gateway and
    the CLI do); kopf gets the same ones, so its own API access and our writes are one login.
    """
    s = OperatorSettings()  # fresh: login may run before the startup handler
    cfg = await load_configuration(
        api_server=s.api_server,
        token=s.api_token.get_secret_value() if s.api_token else None,
        insecure=s.insecure,
    )
    HOLDER.set(cfg)
    return connection_info(cfg)


def connection_info(cfg: Configuration) -> kopf.ConnectionInfo:
    """kopf's view of a kubernetes_asyncio configuration (file paths, never key material)."""
    scheme, token = bearer_token(cfg)
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        scheme=scheme,
        token=token,
    )


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    await runtime.runtime().close()
