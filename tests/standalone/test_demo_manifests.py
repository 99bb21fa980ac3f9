"""`lorafleet up`'s demo manifests are created, never written over what is there
(lorafleet_standalone.demo)."""

from __future__ import annotations

from pathlib import Path

import yaml

from lorafleet_core.storage.manifests import load_folder
from lorafleet_standalone.demo import _write_if_absent


def _alias(adapter: str) -> dict[str, object]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": "demo-zebra-prod"},
        "spec": {"model": "demo/zebra:prod", "tenant": "demo", "adapter": adapter},
    }


def test_a_demo_alias_another_writer_created_in_any_file_is_left_alone(tmp_path: Path):
    """`lorafleet alias set` (or the control API, or a person) got there first, in a file of
    another name: the demo neither writes a second object of that name nor changes it."""
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(_alias("demo-zebra-v2")))
    _write_if_absent(tmp_path, _alias("demo-zebra-v1"))
    (alias,) = load_folder(tmp_path).of_kind("AdapterAlias")
    assert alias.body["spec"]["adapter"] == "demo-zebra-v2"


def test_a_demo_file_that_no_longer_parses_is_not_overwritten(tmp_path: Path):
    broken = tmp_path / "adapteralias-demo-zebra-prod.yaml"
    broken.write_text("kind: [unclosed\n")
    _write_if_absent(tmp_path, _alias("demo-zebra-v1"))
    assert broken.read_text() == "kind: [unclosed\n"


def test_an_absent_demo_alias_is_created(tmp_path: Path):
    _write_if_absent(tmp_path, _alias("demo-zebra-v1"))
    (alias,) = load_folder(tmp_path).of_kind("AdapterAlias")
    assert alias.path.name == "adapteralias-demo-zebra-prod.yaml"
