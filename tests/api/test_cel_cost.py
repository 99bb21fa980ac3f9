"""The CRDs' CEL rules against the API server's cost limits, as well as this machine allows.

There is no API server here, so the cost is computed with the API server's own cost model,
applied by this test:

- run time (what refuses an object): every call whose cost depends on its input is charged as
  cel-go's `interpreter/runtimecost.go` (`matches`: ceil((1 + len(text)) * 0.1) *
  ceil(len(pattern) * 0.25)) and k8s.io/apiserver's `pkg/cel/library/cost.go` (`substring`:
  ceil(len(text) * 0.1)) charge it, on the worst-case value the schema admits (maxItems
  items of maxLength characters); everything else is bounded by OVERHEAD_PER_ITEM per list
  item (cel-go charges 1 per identifier, field selection and constant-cost call; a rule body
  here has fewer than 20 of them). The limits: `PerCallLimit` 1,000,000 per expression and
  `RuntimeCELCostBudget` 10,000,000 per object (k8s.io/apiserver/pkg/apis/cel/config.go).
- the estimate at CRD registration (`StaticEstimatedCostLimit` 10,000,000 per rule,
  apiextensions-apiserver) for the one rule whose estimate is large, by cel-go's
  `checker/cost.go` formula.

Not verified here: the exact figure the API server computes (it adds the constant-cost nodes
this test bounds), and rules of the other CRDs, which call no function whose cost grows with
the input (`self == oldSelf`, `startsWith`, `<=`).
"""

from __future__ import annotations

import math
from typing import Any

import celpy
import pytest
from celpy.evaluation import function_matches

from lorafleet_core.api.crd_validation import K8S_FUNCTIONS, schema_errors
from lorafleet_core.api.models.engine_args import (
    ARG_HEAD,
    EXTRA_ARGS_RULE,
    RESERVED_FLAG_PATTERN,
    reserved_flag,
)

from .test_crds import all_schemas, walk

PER_CALL_LIMIT = 1_000_000
RUNTIME_BUDGET_PER_OBJECT = 10_000_000
STATIC_LIMIT_PER_RULE = 10_000_000
OVERHEAD_PER_ITEM = 20

POOL = dict(all_schemas())["lorafleet.dev_replicapools.yaml"]


def _traversal(text: str) -> int:
    return math.ceil(len(text) * 0.1)


class Meter:
    """Counts what cel-go would charge for the input-dependent calls of one evaluation."""

    def __init__(self) -> None:
        self.cost = 0

    def functions(self) -> dict[str, Any]:
        def matches(text: Any, pattern: Any) -> Any:
            self.cost += math.ceil((1 + len(text)) * 0.1) * math.ceil(len(pattern) * 0.25)
            return function_matches(text, pattern)

        def substring(text: Any, *args: Any) -> Any:
            self.cost += _traversal(text)
            return K8S_FUNCTIONS["substring"](text, *args)

        return {"matches": matches, "substring": substring}


def runtime_cost(rule: str, value: list[Any]) -> tuple[bool, int]:
    """(rule result, cost bound) of `rule` on `value`, a list (every rule costed here is one)."""
    meter = Meter()
    env = celpy.Environment()
    program = env.program(env.compile(rule), functions={**K8S_FUNCTIONS, **meter.functions()})
    result = program.evaluate({"self": celpy.json_to_cel(value)})
    assert not isinstance(result, celpy.CELEvalError), result
    return bool(result), meter.cost + OVERHEAD_PER_ITEM * len(value)


def _list_rules() -> list[tuple[str, dict[str, Any], str]]:
    return [
        (path, node, check["rule"])
        for path, node in walk(POOL)
        for check in node.get("x-kubernetes-validations", [])
        if node.get("type") == "array"
    ]


def worst_case(node: dict[str, Any], rule: str) -> list[Any]:
    """maxItems items, each of maxLength characters in every string the rule reads."""
    items = node["items"]
    if items["type"] == "string":
        return ["-" * 2 + "x" * (items["maxLength"] - 2)] * node["maxItems"]
    item = {
        name: "x" * sub["maxLength"]
        for name, sub in items["properties"].items()
        if f".{name}" in rule and sub.get("type") == "string"
    }
    return [item] * node["maxItems"]


def test_the_extra_args_rule_runs_far_under_the_per_call_limit_on_the_largest_pool():
    """64 arguments of 4,096 characters: the API server would stop a rule that reads each
    whole (4.7M against the 1M limit) and refuse the pool with a cost error, not the rule's
    message; the rule reads each argument's first ARG_HEAD characters."""
    node = POOL["properties"]["spec"]["properties"]["engine"]["properties"]["extraArgs"]
    args = worst_case(node, EXTRA_ARGS_RULE)
    assert len(args) == 64
    assert {len(a) for a in args} == {4096}
    passed, cost = runtime_cost(EXTRA_ARGS_RULE, args)
    assert passed
    assert cost < PER_CALL_LIMIT / 5, cost
    # The worst case also ends with a reserved flag: still refused, at the same cost.
    refused, cost_refused = runtime_cost(EXTRA_ARGS_RULE, [*args[:-1], "--host=0.0.0.0"])
    assert not refused
    assert cost_refused <= cost


def test_every_list_rule_of_a_worst_case_pool_fits_the_per_call_and_per_object_budgets():
    total = 0
    for path, node, rule in _list_rules():
        _, cost = runtime_cost(rule, worst_case(node, rule))
        assert cost < PER_CALL_LIMIT, (path, cost)
        total += cost
    assert total < RUNTIME_BUDGET_PER_OBJECT / 10, total


def test_the_extra_args_rule_estimate_at_registration_fits_the_static_limit():
    """cel-go's checker estimate, which sizes `substring`'s result as its input (it cannot
    know the bound): per item 1 (size) + 1 (>) + 410 (substring) + 410 * 180 (matches) + a
    few constant nodes, times maxItems."""
    node = POOL["properties"]["spec"]["properties"]["engine"]["properties"]["extraArgs"]
    length, items = node["items"]["maxLength"], node["maxItems"]
    pattern = math.ceil(len(RESERVED_FLAG_PATTERN) * 0.25)
    per_item = 2 + math.ceil(length * 0.1) + math.ceil((length + 1) * 0.1) * pattern
    estimate = items * (per_item + OVERHEAD_PER_ITEM)
    assert estimate < STATIC_LIMIT_PER_RULE, estimate


@pytest.mark.parametrize(
    "arg",
    [
        "--host",
        "--host=" + "0" * 4000,
        "--allowed-local-media-path",
        "--allowed_local_media_path.x=" + "/" * 3000,
        "--allowed-local-media-pathx" + "y" * 100,
        "--trust-remote-code" + "=" * 40,
        "-" * 4096,
        "--" + "a" * (ARG_HEAD - 2),
        "--" + "a" * ARG_HEAD,
        "--a=" + "x" * (ARG_HEAD + 10),
        "--max-model-len=" + "9" * 4000,
        "--hostname-of-something-quite-long-indeed",
    ],
)
def test_reading_only_the_head_refuses_exactly_what_the_model_refuses(arg):
    """The rule's cut at ARG_HEAD characters changes no verdict (the longest reserved name is
    24 characters, so its `=`/`.`/end falls inside the head)."""
    passed, _ = runtime_cost(EXTRA_ARGS_RULE, [arg])
    assert passed == (reserved_flag(arg) is None)


def test_the_worst_case_pool_is_one_the_schema_admits():
    node = POOL["properties"]["spec"]["properties"]["engine"]["properties"]["extraArgs"]
    assert schema_errors(node, worst_case(node, EXTRA_ARGS_RULE)) == []
