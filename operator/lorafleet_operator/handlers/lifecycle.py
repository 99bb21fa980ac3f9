"""Operator start-up, login and clean-up."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from lorafleet_core.names import FINALIZER, GROUP
from lorafleet_operator import runtime
from lorafleet_operator.kube import HOLDER
from lorafleet_operator.settings import OperatorSettings


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    runtime.reset()
    runtime.runtime().serve_metrics()
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
async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Explicit API server from settings (tests, dev), else in-cluster, else kubeconfig."""
    s = OperatorSettings()  # fresh: login may run before the startup handler
    info: kopf.ConnectionInfo | None
    if s.api_server:
        info = kopf.ConnectionInfo(
            server=s.api_server,
            insecure=s.insecure,
            token=s.api_token.get_secret_value() if s.api_token else None,
        )
    else:
        info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is not None:
        HOLDER.set(info)
    return info


@kopf.on.cleanup()
async def close(**_: Any) -> None:
    await runtime.runtime().close()
