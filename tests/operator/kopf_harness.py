"""The real operator (kopf's own runner) against a kmock cluster, for a test module's fixture."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from kopf.testing import KopfRunner

from tests.operator.kmock_cluster import Cluster


@contextmanager
def operator_running(cluster: Cluster, env: Mapping[str, str]) -> Iterator[KopfRunner]:
    """Run `lorafleet_operator.handlers` on `cluster`'s namespace with `env` set (restored
    after); fails the test when the operator itself raised."""
    keys = [*env, "LORAFLEET_OPERATOR_API_SERVER"]
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(env, LORAFLEET_OPERATOR_API_SERVER=cluster.url)
    args = ["run", "--standalone", "--namespace", cluster.namespace, "-m"]
    try:
        with KopfRunner([*args, "lorafleet_operator.handlers"], timeout=60) as runner:
            yield runner
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert runner.exception is None, runner.output[-5000:]


def module_fixtures(namespace: str, env: Mapping[str, str]) -> tuple[Any, Any]:
    """A test module's `cluster` (a kmock emulator serving `namespace`) and `operator` (the
    operator running on it with `env`) fixtures, one of each per module:
    `cluster, operator = module_fixtures("lf", ENV)`."""

    @pytest.fixture(scope="module")
    def cluster() -> Iterator[Cluster]:
        c = Cluster(namespace)
        yield c
        c.close()

    @pytest.fixture(scope="module")
    def operator(cluster: Cluster) -> Iterator[KopfRunner]:
        with operator_running(cluster, env) as runner:
            yield runner

    return cluster, operator
