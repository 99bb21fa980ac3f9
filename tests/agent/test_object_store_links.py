"""file:// adapter folders on a shared file system: a tenant writes its own folder, so a
symbolic link in it must not make the agent copy (and hash, and report the hash of) what lies
outside it: another tenant's weights or any file the agent can read."""

from __future__ import annotations

from pathlib import Path

import pytest

from lorafleet_agent.object_store import FetchError, ObjectStore, ObjectStoreConfig
from tests.agent.test_verifier import write_adapter


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A source laid out <tenant>/<adapter>/ with globex's real adapter in it."""
    write_adapter(tmp_path / "store" / "globex" / "support")
    return tmp_path / "store"


def fetch(uri: str, dest: Path, tenant: str) -> int:
    dest.mkdir(exist_ok=True)
    return ObjectStore(ObjectStoreConfig()).fetch(uri, dest, tenant)


def test_a_tenants_adapter_folder_linked_to_another_tenants_is_refused(source, tmp_path):
    (source / "acme").mkdir()
    (source / "acme" / "support").symlink_to(source / "globex" / "support")
    with pytest.raises(FetchError, match=r"acme/support is a symbolic link") as err:
        fetch(f"file://{source}/acme/support/", tmp_path / "dest", "acme")
    assert str(source) not in str(err.value)  # the replica's mount path is not echoed
    assert not list((tmp_path / "dest").iterdir())


@pytest.mark.parametrize("target", ["globex/support/adapter_model.safetensors", "/etc/hostname"])
def test_an_adapter_file_linked_outside_the_folder_is_refused(source, tmp_path, target):
    folder = write_adapter(source / "acme" / "support")
    (folder / "adapter_model.safetensors").unlink()
    (folder / "adapter_model.safetensors").symlink_to(source / target)
    with pytest.raises(FetchError, match=r"adapter_model\.safetensors is a symbolic link"):
        fetch(f"file://{folder}/", tmp_path / "dest", "acme")


def test_links_above_the_tenant_folder_are_the_installers_and_allowed(source, tmp_path):
    """A source mounted through a link (/data -> /mnt/adapters) is not the tenant's doing."""
    write_adapter(source / "acme" / "support")
    (tmp_path / "data").symlink_to(source)
    size = fetch(f"file://{tmp_path}/data/acme/support/", tmp_path / "dest", "acme")
    assert size == sum(p.stat().st_size for p in (tmp_path / "dest").iterdir()) > 0


def test_a_missing_file_is_named_without_the_replicas_path(source, tmp_path):
    folder = write_adapter(source / "acme" / "support")
    (folder / "adapter_config.json").unlink()
    with pytest.raises(FetchError) as err:
        fetch(f"file://{folder}/", tmp_path / "dest", "acme")
    assert str(err.value) == "adapter_config.json: no such file in the adapter's folder"
