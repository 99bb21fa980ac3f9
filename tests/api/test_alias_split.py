"""AdapterAlias spec.split: the pydantic model and the CRD (schema + CEL, as the API server
evaluates them) accept the same weighted splits, and refuse the bad ones with clear messages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from lorafleet_core.api.crd_validation import schema_of, validate
from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasSpec,
    AdapterAliasStatus,
    SplitTarget,
    traffic_summary,
)

from .conftest import examples_of_kind
from .test_models_crd_agree import AGREE

SCHEMA = schema_of("AdapterAlias")
PRIMARY = "acme-support-v1"


def alias_doc(split: Any) -> dict[str, Any]:
    doc = copy.deepcopy(examples_of_kind("AdapterAlias")[0])
    doc["spec"]["adapter"] = PRIMARY
    doc["spec"]["split"] = split
    return doc


def crd_errors(split: Any, old: Any = None) -> list[str]:
    return validate(SCHEMA, alias_doc(split), None if old is None else alias_doc(old))


def model_error(split: Any) -> str | None:
    try:
        AdapterAlias.model_validate(alias_doc(split))
    except ValidationError as exc:
        return str(exc)
    return None


def entry(adapter: str, weight: Any) -> dict[str, Any]:
    return {"adapter": adapter, "weight": weight}


GOOD = [
    pytest.param([entry("acme-support-v2", 5)], id="95/5"),
    pytest.param([entry("acme-support-v2", 50)], id="50/50"),
    pytest.param([entry("acme-support-v2", 1)], id="smallest"),
    pytest.param([entry("acme-support-v2", 99)], id="largest"),
    pytest.param([entry("acme-support-v2", 40), entry("acme-support-v3", 40)], id="three-ways"),
    pytest.param([], id="empty"),
]


@pytest.mark.parametrize("split", GOOD)
def test_good_splits_pass_both(split):
    assert crd_errors(split) == []
    assert model_error(split) is None


BAD = [
    pytest.param([entry(PRIMARY, 5)], "must not name spec.adapter", id="primary"),
    pytest.param(
        [entry("acme-support-v2", 50), entry("acme-support-v3", 50)],
        "at most 99",
        id="sum-100",
    ),
    pytest.param([entry("acme-support-v2", 100)], "99", id="weight-100"),
    pytest.param([entry("acme-support-v2", 0)], "1", id="weight-0"),
    pytest.param([entry("acme-support-v2", 5), entry("acme-support-v2", 5)], "", id="twice"),
    pytest.param([entry("Acme_V2", 5)], "does not match", id="bad-name"),
    pytest.param([{"adapter": "acme-support-v2"}], "weight", id="no-weight"),
    pytest.param([entry("acme-support-v2", "5")], "integer", id="string-weight"),
    pytest.param([entry(f"acme-support-v{i}", 1) for i in range(2, 11)], "8", id="too-many"),
]


@pytest.mark.parametrize(("split", "says"), BAD)
def test_bad_splits_are_refused_by_both(split, says):
    errors = crd_errors(split)
    assert errors, split
    assert says in " ".join(errors)
    assert model_error(split) is not None


def test_the_messages_say_what_to_do():
    [primary] = crd_errors([entry(PRIMARY, 5)])
    assert primary.startswith("spec: split must not name spec.adapter: the primary version")
    [total] = crd_errors([entry("acme-support-v2", 60), entry("acme-support-v3", 40)])
    assert "make it spec.adapter" in total
    assert "add up to 100" in str(model_error([entry("a", 60), entry("b", 40)]))
    assert "names acme-support-v2 more than once" in str(
        model_error([entry("acme-support-v2", 5), entry("acme-support-v2", 5)])
    )
    [twice] = crd_errors([entry("acme-support-v2", 5), entry("acme-support-v2", 5)])
    assert twice.startswith("spec.split[1]: Duplicate value")


def test_a_rollout_step_is_a_valid_update():
    """95/5 -> 50/50 -> no split: each edit passes the API server's update checks."""
    five = [entry("acme-support-v2", 5)]
    half = [entry("acme-support-v2", 50)]
    assert crd_errors(half, old=five) == []
    done = alias_doc(None)
    done["spec"].pop("split")
    assert validate(SCHEMA, done, alias_doc(half)) == []


def test_the_wire_form_leaves_out_an_absent_split():
    """Aliases written by `lorafleet alias set` and the control API keep their old shape."""
    spec = AdapterAliasSpec(model="acme/s:p", tenant="acme", adapter="v1")
    assert "split" not in AdapterAlias(metadata={"name": "a"}, spec=spec).wire()["spec"]


def test_traffic_summary_names_the_primary_first():
    split = [SplitTarget(adapter="v2", weight=5), SplitTarget(adapter="v3", weight=10)]
    assert traffic_summary("v1", split) == "v1=85,v2=5,v3=10"
    assert traffic_summary("v1", None) is None
    assert traffic_summary(None, split) is None


names = st.sampled_from([PRIMARY, "acme-support-v2", "acme-support-v3", "Bad_name", ""])
weights = st.one_of(st.integers(-2, 120), st.sampled_from([1, 49, 50, 98, 99, 100]))
splits = st.lists(st.builds(entry, names, weights), max_size=10)


@AGREE
@given(split=splits)
def test_model_and_crd_agree_on_any_split(split):
    assert (crd_errors(split) == []) == (model_error(split) is None), split


def test_the_longest_split_fits_status_traffic():
    """Nine versions of the longest names (the primary and 8 entries) still fit the field."""
    name = "a" * 252
    split = [SplitTarget(adapter=f"{name}{i}", weight=11) for i in range(8)]
    summary = traffic_summary(f"{name}x", split)
    assert summary is not None
    AdapterAliasStatus(adapter=f"{name}x", split=split, traffic=summary)
