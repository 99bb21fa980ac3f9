"""Shared fixtures for the lorafleet_core tests: repository paths and the example manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml

# celpy raises the interpreter's recursion limit the first time an Environment is built; doing it
# at collection keeps hypothesis from warning that a test changed it.
celpy.Environment()

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
EXAMPLES = REPO / "examples"


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def schema_in_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD manifest's storage version (else its first)."""
    versions: list[dict[str, Any]] = crd["spec"]["versions"]
    version = next((v for v in versions if v.get("storage")), versions[0])
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


COMMITTED_CRDS: dict[str, dict[str, Any]] = {
    crd["spec"]["names"]["kind"]: crd
    for crd in (yaml.safe_load(p.read_text().split("---\n", 1)[1]) for p in CRDS.glob("*.yaml"))
}


def examples_of_kind(kind: str) -> list[dict[str, Any]]:
    found = [d for p in sorted(EXAMPLES.glob("*.yaml")) for d in load_yaml_docs(p)]
    return [d for d in found if d.get("kind") == kind]


@pytest.fixture
def adapter_manifest() -> dict[str, Any]:
    return examples_of_kind("LoRAAdapter")[0]


@pytest.fixture
def alias_manifest() -> dict[str, Any]:
    return examples_of_kind("AdapterAlias")[0]


@pytest.fixture
def pool_manifest() -> dict[str, Any]:
    return examples_of_kind("ReplicaPool")[0]
