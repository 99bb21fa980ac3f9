"""`alias_object_name` is injective over valid public model names, and plan_set refuses a name
that another model's alias holds (the cross-tenant collision of `a/b-c:d` and `a-b/c:d`)."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lorafleet_core.api.models.common import ALIAS_MODEL
from lorafleet_core.planning.alias_deploy import (
    AliasNameTaken,
    alias_object_name,
    plan_set,
)
from tests.operator.control_support import registration
from tests.operator.factories import pool_body

# What Kubernetes itself accepts as metadata.name (k8s.io/apimachinery IsDNS1123Subdomain):
# dot-separated labels that start and end with [a-z0-9]; stricter than the CRD's pattern.
K8S_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

models = st.from_regex(ALIAS_MODEL.replace("$", r"\Z"), fullmatch=True).filter(
    lambda m: len(m) <= 191
)


def _valid_name(name: str) -> bool:
    return len(name) <= 253 and K8S_SUBDOMAIN.fullmatch(name) is not None


def _small_models() -> list[str]:
    """Every valid model over a small alphabet with short parts: each separator next to each."""
    tenants = ["".join(p) for n in (1, 3) for p in itertools.product("a-", repeat=n)]
    parts = ["".join(p) for n in (1, 2, 3, 4) for p in itertools.product("a-._", repeat=n)]
    out = [f"{t}/{n}:{g}" for t in tenants for n in parts for g in parts]
    return [m for m in out if re.fullmatch(ALIAS_MODEL, m)]


def test_the_reported_collisions_get_distinct_names():
    pairs = [
        ("a/b-c:d", "a-b/c:d"),
        ("acme/x_y:z", "acme/x-y:z"),
        ("globex/x:y-z", "globex/x-y:z"),
    ]
    for one, other in pairs:
        assert alias_object_name(one) != alias_object_name(other)


def test_plain_names_stay_readable_as_before():
    """Names without `-` or `_` keep the old form, so aliases created before are found by name."""
    assert alias_object_name("acme/support:prod") == "acme-support-prod"
    assert alias_object_name("acme/v1.2:prod") == "acme-v1.2-prod"
    assert re.fullmatch(r"acme-x-y-z-[0-9a-f]{16}", alias_object_name("acme/x_y:z"))


def test_exhaustively_over_a_small_alphabet_no_two_models_share_a_name():
    models_ = _small_models()
    assert len(models_) > 1000  # the generator produces what it claims to
    seen: dict[str, str] = {}
    for model in models_:
        name = alias_object_name(model)
        assert _valid_name(name), (model, name)
        assert seen.setdefault(name, model) == model, f"{model} and {seen[name]} share {name}"


@settings(max_examples=300)
@given(st.lists(models, min_size=2, max_size=8, unique=True))
def test_distinct_models_distinct_valid_names(drawn: list[str]):
    names_ = [alias_object_name(m) for m in drawn]
    assert len(set(names_)) == len(drawn)
    for name in names_:
        assert _valid_name(name), name


@settings(max_examples=300)
@given(models)
def test_a_readable_name_reads_back_as_its_model(model: str):
    """Readable names hold exactly the two separators as hyphens; hashed ones hold at least
    four, so a hashed name never equals a readable one."""
    name = alias_object_name(model)
    if name.count("-") == 2:
        tenant, rest, tag = name.split("-")
        assert f"{tenant}/{rest}:{tag}" == model
    else:
        assert name.count("-") >= 4


def _adapter(adapter_id: str, tenant: str) -> dict[str, Any]:
    from lorafleet_core.planning.adapter_registration import AdapterRegistration

    return AdapterRegistration.model_validate(registration(adapter_id, tenant=tenant)).manifest()


def test_plan_set_refuses_a_name_held_by_another_model():
    pool = pool_body("pool", engine={"maxRank": 16})
    held: dict[str, Any] = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": "a-b-c-d"},
        "spec": {"model": "a-b/c:d", "tenant": "a-b", "adapter": "ab-v1"},
    }
    with pytest.raises(AliasNameTaken, match="already serves model 'a-b/c:d'"):
        plan_set(
            "a/bc:d.e",
            "a-v1",
            found=_adapter("a-v1", "a"),
            pools=[pool],
            existing=None,
            occupant={**held, "metadata": {"name": alias_object_name("a/bc:d.e")}},
            where="folder x",
        )
    # The model's own object under that name is an update, not a refusal.
    own = {**held, "spec": {**held["spec"], "model": "a/bc:d.e", "tenant": "a"}}
    body, previous = plan_set(
        "a/bc:d.e",
        "a-v1",
        found=_adapter("a-v1", "a"),
        pools=[pool],
        existing=own,
        occupant=own,
        where="folder x",
    )
    assert (body["spec"]["adapter"], previous) == ("a-v1", "ab-v1")
