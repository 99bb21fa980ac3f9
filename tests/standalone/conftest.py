"""Fixtures of the standalone tests: a base model, a manifests folder, the shared demo `up`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.manifest_folder import base_model, folder
from tests.standalone.up_harness import SharedDemoUp

__all__ = ["base_model", "folder", "shared_demo_up"]


@pytest.fixture(scope="session")
def shared_demo_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDemoUp]:
    """The demo `lorafleet up` the demo tour and the tool-call checks share (started on first
    use; every one started is stopped at the end of the session)."""
    with contextlib.ExitStack() as exits:
        yield SharedDemoUp(lambda: tmp_path_factory.mktemp("demo-up") / "state", exits)
