"""Standalone defaults: the demo pool takes adapters only from `<store>/<tenant>/`, and a
cluster-sized replica count from a manifest is capped on one machine."""

from __future__ import annotations

from pathlib import Path

from lorafleet_core.api.models import LoRAAdapterSpec, ReplicaBounds
from lorafleet_core.planning.adapters import validate_adapter
from lorafleet_core.storage import objectstore
from lorafleet_standalone.demo import DEMO_TENANT, demo_pool
from lorafleet_standalone.local_replicas import MAX_LOCAL_REPLICAS, local_replica_count

BASE_HASH = "sha256:" + "ab" * 32


def _spec(weights_uri: str, tenant: str = DEMO_TENANT) -> LoRAAdapterSpec:
    return LoRAAdapterSpec.model_validate(
        {
            "tenant": tenant,
            "version": "v1",
            "baseModelHash": BASE_HASH,
            "rank": 8,
            "alpha": 16,
            "targetModules": ["q_proj", "v_proj"],
            "weightsUri": weights_uri,
            "checksum": "sha256:" + "cd" * 32,
        }
    )


def test_demo_pool_accepts_its_store_and_rejects_anywhere_else(tmp_path: Path) -> None:
    store = objectstore.parse_store_uri(objectstore.default_store(tmp_path))
    pool = demo_pool(tmp_path / "base", BASE_HASH, 1, str(store))
    own = str(store.child(DEMO_TENANT, "zebra", "v1"))
    assert validate_adapter(_spec(own), [pool]).ok
    elsewhere = [
        f"file://{tmp_path}/elsewhere/{DEMO_TENANT}/zebra/v1/",  # outside the store
        str(store.child("globex", "secret", "v1")),  # another tenant's files
        str(store.child(DEMO_TENANT, "..", "globex", "v1")),
    ]
    for uri in elsewhere:
        verdict = validate_adapter(_spec(uri), [pool])
        assert not verdict.ok, uri
        assert verdict.reason == "WeightsOutsideSources", (uri, verdict)


def test_a_clusters_replica_count_is_capped_on_one_machine() -> None:
    said: list[str] = []
    big = ReplicaBounds(min=2, max=400, desired=300)
    assert local_replica_count(big, None, said.append, "llama") == MAX_LOCAL_REPLICAS
    assert "asks for 300 replicas" in said[0]
    assert local_replica_count(big, 12, said.append, "llama") == 12  # --replicas is honoured
    assert local_replica_count(ReplicaBounds(min=0, max=4), None, said.append, "p") == 1
    assert len(said) == 1
