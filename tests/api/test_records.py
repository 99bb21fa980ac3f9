"""Adapter records and the owned-adapters annotation, including the downward-API file format."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lorafleet_core.api.models import LoRAAdapter
from lorafleet_core.wire.records import (
    AdapterRecord,
    decode_owned,
    encode_owned,
    format_downward_annotations,
    parse_downward_annotations,
)

HASH = "sha256:" + "cd" * 32


def record(i: int, **overrides) -> AdapterRecord:
    fields = {
        "id": f"tenant{i}-support-v1",
        "tenant": f"tenant{i}",
        "base_model_hash": HASH,
        "rank": 16,
        "alpha": 32.0,
        "target_modules": ("q_proj", "v_proj"),
        "weights_uri": f"s3://adapters/tenant{i}/v1/",
        "checksum": HASH,
    }
    fields.update(overrides)
    return AdapterRecord.model_validate(fields)


def test_record_from_a_lora_adapter(adapter_manifest):
    adapter = LoRAAdapter.model_validate(adapter_manifest)
    rec = AdapterRecord.from_spec(adapter.metadata.name, adapter.spec)
    assert rec.id == adapter_manifest["metadata"]["name"]
    assert rec.checksum == adapter_manifest["spec"]["checksum"]
    assert rec.weights_uri == adapter_manifest["spec"]["weightsUri"]
    assert rec.target_modules == tuple(adapter_manifest["spec"]["targetModules"])
    assert rec.size_bytes == adapter_manifest["spec"]["sizeBytes"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("weights_uri", "http://x/y"), ("checksum", "sha256:00"), ("rank", 0), ("id", "Bad_Id")],
)
def test_record_refuses_what_the_crd_refuses(field, value):
    with pytest.raises(ValidationError):
        record(1, **{field: value})


def test_record_is_frozen():
    with pytest.raises(ValidationError):
        record(1).rank = 8  # type: ignore[misc]


def test_annotation_is_deterministic_and_sorted():
    records = [record(i) for i in (3, 1, 2)]
    value = encode_owned(records)
    assert value == encode_owned(reversed(records))
    assert [row["id"] for row in json.loads(value)] == [
        "tenant1-support-v1",
        "tenant2-support-v1",
        "tenant3-support-v1",
    ]
    assert " " not in value  # compact: annotations are capped at 256 KiB per object
    assert "size_bytes" not in value  # unset optionals are left out
    assert decode_owned(value) == sorted(records, key=lambda r: r.id)


def test_annotation_size_for_a_replicas_share():
    """5,000 adapters x 2 owners / 26 replicas ~ 385 records per pod fit the default budget."""
    value = encode_owned(record(i, size_bytes=83_886_080) for i in range(385))
    assert len(value.encode()) < 196_608


def test_decode_empty_and_malformed():
    assert decode_owned("") == []
    assert decode_owned("  \n") == []
    with pytest.raises(ValueError, match="JSON array"):
        decode_owned('{"id": "x"}')
    with pytest.raises(json.JSONDecodeError):
        decode_owned("[{")
    with pytest.raises(ValidationError):
        decode_owned('[{"id": "x"}]')


def test_parse_kubelet_downward_file():
    """The file kubelet writes for `fieldRef: metadata.annotations`: key="Go-quoted value"."""
    owned = encode_owned([record(1)])
    go_quoted = owned.replace("\\", "\\\\").replace('"', '\\"')
    text = (
        'kubectl.kubernetes.io/restartedAt="2026-11-29T11:00:00Z"\n'
        f'lorafleet.dev/owned-adapters="{go_quoted}"\n'
        'note="line one\\nline two\\ttab \\u00e9"\n'
    )
    parsed = parse_downward_annotations(text)
    assert decode_owned(parsed["lorafleet.dev/owned-adapters"]) == [record(1)]
    assert parsed["note"] == "line one\nline two\ttab \u00e9"
    assert parsed["kubectl.kubernetes.io/restartedAt"] == "2026-11-29T11:00:00Z"


@settings(deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-z0-9.]{1,20}/[a-z0-9-]{1,20}", fullmatch=True),
        st.text(max_size=200),
        max_size=8,
    )
)
def test_downward_format_round_trips(annotations):
    text = format_downward_annotations(annotations)
    assert parse_downward_annotations(text) == annotations
    assert text.count("\n") == len(annotations)  # one line per key, newlines escaped
