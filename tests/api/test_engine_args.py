"""ReplicaPool fields that reach Kubernetes objects or vLLM's command line: engine.extraArgs may
not set the flags lorafleet's guarantees rest on (checked against the installed vLLM's own
parser), a pool's name must be one its StatefulSet and Service can carry, and the template may
not take lorafleet's volumes; the CRD refuses each as the model does."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lorafleet_core.api.crd_validation import schema_of, validate
from lorafleet_core.api.models import DNS_SUBDOMAIN, MAX_POOL_NAME, POOL_NAME, ReplicaPool
from lorafleet_core.api.models.engine_args import RESERVED_FLAGS, reserved_flag
from lorafleet_core.api.names import label_value
from lorafleet_core.planning.merge_advice import merged_pool_name
from tests.operator.factories import pool_body

SCHEMA = schema_of("ReplicaPool")


def outcome(doc: dict[str, Any]) -> tuple[bool, bool]:
    """(the model accepts it, the CRD accepts it)."""
    try:
        ReplicaPool.model_validate(doc)
        model = True
    except ValidationError:
        model = False
    return model, validate(SCHEMA, doc) == []


def with_extra_args(*args: str) -> dict[str, Any]:
    return pool_body(engine={"extraArgs": list(args)})


@pytest.mark.parametrize(
    "args",
    [
        ["--host", "0.0.0.0"],  # noqa: S104 (the point: vLLM on the pod network)
        ["--host=0.0.0.0"],
        ["--hos", "0.0.0.0"],  # noqa: S104 (argparse takes a unique prefix)
        ["--port", "9000"],
        ["--api-key", "known"],
        ["--api_key=known"],  # vLLM reads _ as -
        ["--trust-remote-code"],
        ["--trust-remote"],
        ["--lora-modules", "evil=/mnt/unverified"],
        ["--lora-modules.evil", "/mnt/unverified"],  # vLLM's dotted JSON form
        ["--no-enable-lora"],
        ["--max-lora-rank", "1000000000"],
        ["--max_loras=1"],
        ["--served-model-name", "other"],
        ["--config", "/etc/any-flags.yaml"],
        ["--allowed-local-media-path", "/"],
        ["--enforce-eager", "--uds", "/tmp/vllm.sock"],
    ],
)
def test_extra_args_setting_a_flag_lorafleet_owns_are_refused_by_model_and_crd(args):
    doc = with_extra_args(*args)
    assert outcome(doc) == (False, False), args
    with pytest.raises(ValidationError, match="which lorafleet sets itself or refuses"):
        ReplicaPool.model_validate(doc)


@pytest.mark.parametrize(
    "args",
    [
        ["--enforce-eager"],
        ["--max-num-seqs", "64"],
        ["--enable-lora-bias"],
        ["--config-format", "hf"],
        ["--model-impl", "vllm"],
        ["--tool-call-parser", "hermes"],
        ["--gpu-memory-utilization=0.85"],
        ["--compilation-config.level", "3"],
    ],
)
def test_ordinary_extra_args_pass_model_and_crd(args):
    assert outcome(with_extra_args(*args)) == (True, True), args


@functools.cache
def vllm_options() -> dict[str, str]:
    """Every long option of the installed vLLM's OpenAI server (no `--`) -> its action's dest."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser())
    assert parser.allow_abbrev  # why abbreviations are checked at all
    return {
        o[2:]: action.dest
        for action in parser._actions
        for o in action.option_strings
        if o.startswith("--")
    }


def test_every_reserved_flag_is_a_flag_of_the_installed_vllm():
    missing = [f for f in RESERVED_FLAGS if f not in vllm_options()]
    assert missing == []


def test_exactly_the_abbreviations_vllm_resolves_to_a_reserved_flag_are_refused():
    """argparse resolves `--p` to the one option starting with `p` (an exact name wins); a
    prefix that names a reserved flag must be refused, one that names an allowed flag not."""
    options = vllm_options()
    wrong: list[str] = []
    for name in options:
        for end in range(2, len(name) + 1):
            prefix = name[:end]
            hits = {prefix} if prefix in options else {o for o in options if o.startswith(prefix)}
            if len(hits) != 1:
                continue  # ambiguous: vLLM refuses it itself
            resolved = hits.pop()
            refused = reserved_flag(f"--{prefix}") is not None
            underscored = reserved_flag(f"--{prefix.replace('-', '_')}") is not None
            if refused != (resolved in RESERVED_FLAGS) or underscored != refused:
                wrong.append(f"--{prefix} -> {resolved} (refused: {refused})")
    assert wrong == [], wrong


@pytest.mark.parametrize(
    ("name", "accepted"),
    [
        ("llama-7b", True),
        ("p" * MAX_POOL_NAME, True),
        ("p" * (MAX_POOL_NAME + 1), False),  # pods never start: revision label > 63
        ("llama.7b", False),  # a Service name holds no dots
        ("7b-llama", False),  # nor starts with a digit
        ("llama-", False),
    ],
)
def test_pool_names_its_statefulset_and_service_cannot_carry_are_refused(name, accepted):
    doc = copy.deepcopy(pool_body(name))
    assert outcome(doc) == (accepted, accepted)


@pytest.mark.parametrize(
    ("template", "accepted"),
    [
        ({"volumes": [{"name": "cache", "emptyDir": {}}]}, False),
        ({"volumes": [{"name": "tmp", "emptyDir": {}}]}, False),
        ({"volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}, False),
        ({"volumeMounts": [{"name": "x", "mountPath": "/var/cache/lorafleet"}]}, False),
        (
            {
                "volumes": [{"name": "models", "emptyDir": {}}],
                "volumeMounts": [{"name": "models", "mountPath": "/models"}],
            },
            True,
        ),
    ],
)
def test_template_volumes_lorafleet_reserves_are_refused_by_the_crd_as_by_the_model(
    template, accepted
):
    """The API server accepted a pool edit adding a `/tmp` mount that the operator and the
    gateway then refused as a whole pool: every adapter on it stopped being served."""
    assert outcome(pool_body(template=template)) == (accepted, accepted)


adapter_names = st.from_regex(DNS_SUBDOMAIN.replace("$", r"\Z"), fullmatch=True).filter(
    lambda n: len(n) <= 253
)


@settings(max_examples=300, deadline=None)
@given(name=adapter_names, other=adapter_names)
def test_every_adapter_name_gives_a_valid_distinct_merged_pool_and_label(name, other):
    pool = merged_pool_name(name)
    assert len(pool) <= MAX_POOL_NAME
    assert re.fullmatch(POOL_NAME.strip("^$"), pool), pool
    assert len(label_value(name)) <= 63
    if name != other:
        assert merged_pool_name(other) != pool
        assert label_value(other) != label_value(name)
