"""The CRD generator (lorafleet_core.api.crds.openapi_schema) on models made for the purpose: it
refuses what Kubernetes cannot express, turns a const into an enum, keeps optional fields plain
unless asked nullable, and keeps class- and field-level CEL rules both."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from lorafleet_core.api import crds


class _Union(BaseModel):
    value: int | str = Field(description="two types")


class _Literal(BaseModel):
    mode: Literal["a"] = Field(default="a", description="one value")


class _Ruled(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self.a > 0", "message": "m"}]}
    )
    a: int = Field(description="a")


class _HasRuled(BaseModel):
    inner: _Ruled = Field(
        description="field-level rules add to the class's",
        json_schema_extra={"x-kubernetes-validations": [{"rule": "self.a < 9", "message": "n"}]},
    )


class _Nullable(BaseModel):
    plain: int | None = Field(default=None, description="absent means unset")
    explicit: int | None = Field(
        default=None, description="null means something", json_schema_extra={"nullable": True}
    )


def test_generator_refuses_multi_type_unions():
    with pytest.raises(ValueError, match="not structural"):
        crds.openapi_schema(_Union)


def test_generator_turns_const_into_enum():
    schema = crds.openapi_schema(_Literal)
    assert schema["properties"]["mode"] == {
        "type": "string",
        "enum": ["a"],
        "default": "a",
        "description": "one value",
    }


def test_optional_fields_are_plain_types_unless_asked_nullable():
    props = crds.openapi_schema(_Nullable)["properties"]
    assert props["plain"] == {"type": "integer", "description": "absent means unset"}
    assert props["explicit"] == {
        "type": "integer",
        "nullable": True,
        "description": "null means something",
    }


def test_class_and_field_rules_are_both_kept():
    inner = crds.openapi_schema(_HasRuled)["properties"]["inner"]
    assert [r["rule"] for r in inner["x-kubernetes-validations"]] == ["self.a > 0", "self.a < 9"]
    assert inner["description"] == "field-level rules add to the class's"
