"""Where an adapter's weights may come from: a pool's `spec.adapterSources`, each adapter under
`<source>/<tenant>/` (the layout `lorafleet adapter push` writes).

One rule for the operator's validation (planning.adapters) and the gateway, which serves no
adapter a pool refuses this way whatever its status says (lorafleet_gateway.catalog_pools).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote, urlparse

from lorafleet_core.api.models import LoRAAdapterSpec, ReplicaPool
from lorafleet_core.api.reasons import NO_ADAPTER_SOURCES, WEIGHTS_OUTSIDE_SOURCES
from lorafleet_core.planning.validation import Validation


def source_problem(spec: LoRAAdapterSpec, pool: ReplicaPool) -> Validation | None:
    """Why `pool` refuses where the adapter's weights live (its adapterSources), or None.

    The gateway asks it too (lorafleet_gateway.catalog_pools): a Ready status on an adapter
    every pool refuses this way was not written by the operator.
    """
    name = pool.metadata.name
    sources = pool.spec.adapter_sources
    if not sources:
        # Secure by default: without sources any location would do, so a tenant could point
        # replicas at another tenant's folder (and, with its checksum from that tenant's
        # LoRAAdapter, serve those weights as its own) or probe the replica's own files with
        # file://, reading the answer from this status. Not final: the pool's fix clears it.
        return Validation(
            False,
            NO_ADAPTER_SOURCES,
            f"ReplicaPool {name} sets no spec.adapterSources, so it takes no adapter: list "
            "the object-store prefixes adapters come from (each adapter's weightsUri must "
            "lie under <prefix>/<tenant>/, the layout `lorafleet adapter push` writes)",
        )
    if not weights_in_sources(spec.weights_uri, spec.tenant, sources):
        return Validation(
            False,
            WEIGHTS_OUTSIDE_SOURCES,
            f"weightsUri {spec.weights_uri} is not under <source>/{spec.tenant}/ of "
            f"ReplicaPool {name}'s adapterSources ({', '.join(sources)}); upload it with "
            "`lorafleet adapter push --store <source>`",
            final=True,
        )
    return None


def weights_in_sources(uri: str, tenant: str, sources: Sequence[str]) -> bool:
    """Whether `uri` lies under `<source>/<tenant>/` of one of `sources`.

    Compared decoded and segment by segment, as the agent resolves it (it unquotes file://
    paths), so neither `%2e%2e`, `..` nor a prefix that merely starts alike
    (`s3://b/acme-evil/` for tenant `acme`) escapes the tenant's folder.
    """

    def segments(value: str) -> tuple[str, str, list[str]] | None:
        parsed = urlparse(value)
        parts = [p for p in unquote(parsed.path).split("/") if p]
        if any(p in (".", "..") for p in parts):
            return None
        return parsed.scheme, parsed.netloc, parts

    have = segments(uri)
    if have is None:
        return False
    for source in sources:
        want = segments(source)
        if want is None:
            continue
        scheme, netloc, parts = want
        prefix = [*parts, tenant]
        if (have[0], have[1]) == (scheme, netloc) and have[2][: len(prefix)] == prefix:
            return True
    return False
