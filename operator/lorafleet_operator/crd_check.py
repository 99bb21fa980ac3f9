"""At start: say when an installed lorafleet CRD is older than this operator needs.

Run once per operator start, in the background (it waits for the login like every API call).
Each CRD lacking fields the models declare gets a warning log line and a Warning Event
`CRDOutdated` about the CRD, in the operator's first namespace (`kubectl get events -n $NS`;
`kubectl describe crd <name>`), naming the fields and the fix (docs/guides/deploy.md, "Upgrading:
the CRDs first"). A CRD that is missing entirely is only logged: kopf cannot serve its kind.
"""

from __future__ import annotations

import json
import logging

from lorafleet_core.api import reasons
from lorafleet_core.api.crd_compat import outdated_fields
from lorafleet_core.api.crd_resources import RESOURCES
from lorafleet_core.kube.client import is_not_found
from lorafleet_operator.kube import HOLDER

log = logging.getLogger(__name__)

FIX = (
    "apply this release's CRDs server-side before `helm upgrade` (kubectl apply --server-side "
    "--force-conflicts -f charts/lorafleet/crds/; docs/guides/deploy.md#upgrading-the-crds-first)"
)
SHOWN = 8  # fields named in a message; the count says how many more


async def check_crds(namespace: str) -> dict[str, list[str]]:
    """CRD name -> the fields it lacks, for each outdated CRD (also logged and evented)."""
    kube = await HOLDER.client()
    found: dict[str, list[str]] = {}
    for resource in RESOURCES:
        name = resource.crd_name
        try:
            resp = await kube.extensions.read_custom_resource_definition(
                name, _preload_content=False
            )
            async with resp:
                crd = json.loads(await resp.read())
        except Exception as exc:
            if not is_not_found(exc):
                raise
            log.warning("CRD %s is not installed: %s", name, FIX)
            continue
        missing = outdated_fields(resource, crd)
        if not missing:
            continue
        found[name] = missing
        more = f" and {len(missing) - SHOWN} more" if len(missing) > SHOWN else ""
        message = (
            f"CRD {name} is older than this operator: it lacks {', '.join(missing[:SHOWN])}"
            f"{more}, which the API server drops from every object. Fix: {FIX}"
        )
        log.warning("%s", message)
        meta = crd.get("metadata") or {}
        involved = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "name": name,
            "uid": meta.get("uid", ""),
        }
        await kube.post_event(namespace, involved, "Warning", reasons.CRD_OUTDATED, message)
    return found
