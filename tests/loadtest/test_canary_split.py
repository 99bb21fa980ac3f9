"""`lorafleet canary` against an alias with a weighted split in force, over real HTTP: a real
gateway (files catalog) routing 50/50 to stand-in replicas whose answers name the adapter
version that produced them (`[replica|adapter]`), each version's marker being its own name."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from lorafleet_cli.main import main
from lorafleet_core.api.models.alias import AdapterAliasStatus, SplitTarget
from lorafleet_core.storage.standalone_state import save_alias_statuses
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, GatewayEnv, start_env, stop_env
from tests.waiting import eventually

ALIAS = "acme/support:prod"
ALIAS_NAME = "acme-support-prod"
V1, V2 = "acme-support-v1", "acme-support-v2"
ROUNDS = 40  # at 50/50, both versions answer in all but 2 * 2**-40 of runs


def marker(version: str) -> str:
    return f"|{version}]"


def annotate_markers(folder: Path) -> None:
    docs = [m.adapter(name, "acme") for name in (V1, V2, "acme-unaliased-v1")]
    for doc in docs:
        doc["metadata"]["annotations"] = {
            "lorafleet.dev/canary-marker": marker(doc["metadata"]["name"])
        }
    m.write(folder, "adapters.yaml", [*docs, m.adapter("globex-bot-v1", "globex")])


def put_in_force(folder: Path, split: list[SplitTarget] | None) -> None:
    save_alias_statuses(folder, {ALIAS_NAME: AdapterAliasStatus(adapter=V1, split=split)})


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(tmp_path, n_replicas=2)
    try:
        version = e.gw.holder.current.version
        annotate_markers(e.folder)
        put_in_force(e.folder, [SplitTarget(adapter=V2, weight=50)])
        eventually(
            lambda: (
                e.gw.holder.current.version > version
                and ALIAS in e.gw.holder.current.aliases
                and e.gw.holder.current.aliases[ALIAS].split == ((V2, 50),)
            ),
            what="the split in force in the gateway's catalog",
        )
        yield e
    finally:
        stop_env(e)


def canary(env: GatewayEnv, tmp_path: Path, manifests: Path) -> int:
    key = tmp_path / "key"
    key.write_text(KEYS["acme"])
    argv = ["canary", "--gateway", env.server.url, "--key-file", str(key)]
    argv += ["--manifests", str(manifests), "--aliases", ALIAS]
    return main([*argv, "--rounds", str(ROUNDS), "--interval", "0", "--max-tokens", "8"])


def test_each_version_answering_its_own_marker_passes(env, tmp_path, capsys):
    assert canary(env, tmp_path, env.folder) == 0
    out = capsys.readouterr().out
    assert f"OK: {ROUNDS} probes" in out
    # Both versions served, each counted and none wrong.
    served = out.split("served by version: ")[1].splitlines()[0]
    assert re.fullmatch(rf"{V1} \d+ \(ok\), {V2} \d+ \(ok\)", served), served


def test_a_version_answering_the_others_marker_fails(env, tmp_path, capsys):
    for replica in env.replicas.values():
        replica.answer_as[V2] = V1  # v2's replicas answer with v1's marker
    assert canary(env, tmp_path, env.folder) == 1
    out = capsys.readouterr().out
    served = out.split("served by version: ")[1].splitlines()[0]
    # v1 is right every time; every one of v2's answers is counted wrong.
    found = re.fullmatch(rf"{V1} \d+ \(ok\), {V2} (\d+) \((\d+) wrong\)", served)
    assert found, served
    n_v2 = int(found[1])
    assert n_v2 > 0
    assert int(found[2]) == n_v2
    assert f"FAIL: {ROUNDS} probes over 1 aliases, {n_v2} wrong or missing markers" in out


def test_a_version_outside_the_split_in_force_fails(env, tmp_path, capsys):
    # The canary's view of the alias has no split in force, yet the gateway routes half the
    # requests to v2, which answers its own marker: v2 must not be accepted.
    view = tmp_path / "view"
    shutil.copytree(env.folder, view)
    put_in_force(view, None)
    assert canary(env, tmp_path, view) == 1
    out = capsys.readouterr().out
    assert "(version not in force)" in out
    served = out.split("served by version: ")[1].splitlines()[0]
    assert re.search(rf"{V1} \d+ \(ok\)", served), served
    assert re.search(rf"{V2} \d+ \(not in force\)", served), served


def canary_with_markers(env: GatewayEnv, tmp_path: Path, markers: list[str]) -> int:
    """As a cluster's canary runs: no manifests, the versions and markers from `--markers`."""
    key = tmp_path / "key"
    key.write_text(KEYS["acme"])
    argv = ["canary", "--gateway", env.server.url, "--key-file", str(key), "--markers", *markers]
    return main([*argv, "--rounds", str(ROUNDS), "--interval", "0", "--max-tokens", "8"])


def test_per_version_markers_pass_when_each_version_answers_its_own(env, tmp_path, capsys):
    markers = [f"{ALIAS}@{v}={marker(v)}" for v in (V1, V2)]
    assert canary_with_markers(env, tmp_path, markers) == 0
    out = capsys.readouterr().out
    assert f"OK: {ROUNDS} probes over 1 aliases" in out
    served = out.split("served by version: ")[1].splitlines()[0]
    assert re.fullmatch(rf"{V1} \d+ \(ok\), {V2} \d+ \(ok\)", served), served


def test_per_version_markers_swapped_fail_for_every_answer(env, tmp_path, capsys):
    markers = [f"{ALIAS}@{V1}={marker(V2)}", f"{ALIAS}@{V2}={marker(V1)}"]
    assert canary_with_markers(env, tmp_path, markers) == 1
    out = capsys.readouterr().out
    assert f"FAIL: {ROUNDS} probes over 1 aliases, {ROUNDS} wrong or missing markers" in out
    served = out.split("served by version: ")[1].splitlines()[0]
    found = re.fullmatch(rf"{V1} (\d+) \((\d+) wrong\), {V2} (\d+) \((\d+) wrong\)", served)
    assert found, served
    assert found[1] == found[2], served
    assert found[3] == found[4], served


def test_a_version_without_a_per_version_marker_fails(env, tmp_path, capsys):
    # v2 answers its own marker, but the canary was told only of v1: v2 must not be accepted.
    assert canary_with_markers(env, tmp_path, [f"{ALIAS}@{V1}={marker(V1)}"]) == 1
    out = capsys.readouterr().out
    assert "(version not in force)" in out
    served = out.split("served by version: ")[1].splitlines()[0]
    assert re.fullmatch(rf"{V1} \d+ \(ok\), {V2} \d+ \(not in force\)", served), served
