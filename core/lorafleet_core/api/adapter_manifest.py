"""The one LoRAAdapter builder: what `lorafleet adapter push` and the demo write."""

from __future__ import annotations

import re

from lorafleet_core.api import names
from lorafleet_core.api.models import LoRAAdapter, LoRAAdapterSpec, ObjectMeta
from lorafleet_core.storage.adapter_files import AdapterInfo


def adapter_object_name(tenant: str, name: str, version: str) -> str:
    raw = f"{tenant}-{name}-{version}".lower()
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", raw).strip("-.")
    return cleaned[:253]


def build_adapter(
    *,
    object_name: str,
    tenant: str,
    version: str,
    info: AdapterInfo,
    base_hash: str,
    weights_uri: str,
    checksum: str,
    adapter_name: str,
) -> LoRAAdapter:
    return LoRAAdapter(
        metadata=ObjectMeta(
            name=object_name,
            labels={names.LABEL_TENANT: tenant, f"{names.GROUP}/adapter-name": adapter_name},
        ),
        spec=LoRAAdapterSpec(
            tenant=tenant,
            version=version,
            base_model_hash=base_hash,
            rank=info.rank,
            alpha=info.alpha,
            target_modules=list(info.target_modules),
            weights_uri=weights_uri,
            checksum=checksum,
            size_bytes=info.size_bytes,
        ),
    )
