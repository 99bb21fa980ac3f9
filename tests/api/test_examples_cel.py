"""The example manifests pass the committed CRDs' schemas and CEL rules; bad ones are refused
with a message naming the rule, by the CRD (as the API server would) and by the models."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_core.api.crd_validation import (
    apply_defaults,
    cel_errors,
    validate,
)
from lorafleet_core.api.models import AdapterAlias, LoRAAdapter, ReplicaPool

from .conftest import CRDS, EXAMPLES, examples_of_kind, load_yaml_docs, schema_in_crd

MODELS = {"LoRAAdapter": LoRAAdapter, "AdapterAlias": AdapterAlias, "ReplicaPool": ReplicaPool}


def committed_schema(kind: str) -> dict[str, Any]:
    for path in CRDS.glob("*.yaml"):
        (crd,) = load_yaml_docs(path)
        if crd["spec"]["names"]["kind"] == kind:
            return schema_in_crd(crd)
    raise AssertionError(f"no CRD for {kind}")


ALL_EXAMPLES = [
    (path.name, doc) for path in sorted(EXAMPLES.glob("*.yaml")) for doc in load_yaml_docs(path)
]
EXAMPLE_DOCS = [
    pytest.param(doc, id=f"{name}:{doc['metadata']['name']}") for name, doc in ALL_EXAMPLES
]


def test_examples_cover_every_kind():
    kinds = [doc["kind"] for _, doc in ALL_EXAMPLES]
    assert kinds.count("LoRAAdapter") >= 2
    assert {"ReplicaPool", "AdapterAlias", "Secret"} <= set(kinds)
    adapters = examples_of_kind("LoRAAdapter")
    assert len({a["spec"]["tenant"] for a in adapters}) == 1


@pytest.mark.parametrize("doc", EXAMPLE_DOCS)
def test_example_is_valid(doc):
    if doc["kind"] == "Secret":
        kubernetes_validate.validate(doc, "1.30", strict=True)
        keys = TenantKeys.from_secret(doc)
        assert keys.tenant == "acme"
        assert len(KeyIndex([keys])) == len(keys.key_hashes) >= 1
        return
    assert validate(committed_schema(doc["kind"]), doc) == []
    MODELS[doc["kind"]].model_validate(doc)


def test_examples_hang_together():
    """The alias names an example adapter of its tenant; adapters match every pool's base model."""
    adapters = {a["metadata"]["name"]: a for a in examples_of_kind("LoRAAdapter")}
    alias = examples_of_kind("AdapterAlias")[0]
    assert alias["spec"]["adapter"] in adapters
    assert adapters[alias["spec"]["adapter"]]["spec"]["tenant"] == alias["spec"]["tenant"]
    for pool in map(ReplicaPool.model_validate, examples_of_kind("ReplicaPool")):
        if pool.spec.merged is not None:  # a merged pool names an example adapter
            assert pool.spec.merged.adapter in adapters
        for adapter in adapters.values():
            assert adapter["spec"]["baseModelHash"] == pool.spec.base_model.hash
            assert adapter["spec"]["rank"] <= pool.spec.engine.max_rank


def test_secret_example_holds_no_plaintext_key():
    text = (EXAMPLES / "tenant-keys-secret.yaml").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "lf-" not in body


def test_secret_example_is_read_with_every_limit():
    doc = yaml.safe_load((EXAMPLES / "tenant-keys-secret.yaml").read_text())
    keys = TenantKeys.from_secret(doc)
    assert (keys.requests_per_second, keys.tokens_per_minute) == (20.0, 200_000)
    assert keys.max_concurrent_requests == 64


# --- bad manifests: (kind, how to break it, what the message must name) -------------------------


def _set(doc: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    *parents, last = dotted.split(".")
    for part in parents:
        node = node[part]
    node[last] = value
    return out


BAD_CREATES = [
    ("LoRAAdapter", "spec.rank", 0, "spec.rank: 0 is less than the minimum of 1"),
    ("LoRAAdapter", "spec.rank", 300, "spec.rank: 300 is greater than the maximum of 256"),
    ("LoRAAdapter", "spec.checksum", "sha256:1234", "spec.checksum: 'sha256:1234' does not match"),
    ("LoRAAdapter", "spec.checksum", "a" * 64, "spec.checksum"),
    ("LoRAAdapter", "spec.weightsUri", "http://models.example.com/a/", "spec.weightsUri"),
    ("LoRAAdapter", "spec.tenant", "Acme", "spec.tenant"),
    ("LoRAAdapter", "spec.targetModules", [], "spec.targetModules"),
    ("AdapterAlias", "spec.model", "globex/support:prod", "model must start with '<spec.tenant>/'"),
    ("AdapterAlias", "spec.model", "acme-support", "spec.model"),
    ("ReplicaPool", "spec.replicas.min", 30, "replicas.min must be <= replicas.max"),
    ("ReplicaPool", "spec.engine.maxRank", 512, "spec.engine.maxRank"),
]


@pytest.mark.parametrize(("kind", "field", "value", "expected"), BAD_CREATES)
def test_bad_manifest_is_refused_naming_the_rule(kind, field, value, expected):
    doc = _set(examples_of_kind(kind)[0], field, value)
    errors = validate(committed_schema(kind), doc)
    assert any(expected in e for e in errors), errors
    # The models refuse the same manifest, so the operator and standalone mode agree.
    with pytest.raises(ValidationError):
        MODELS[kind].model_validate(doc)


def test_cel_rule_message_names_the_rule():
    alias = _set(examples_of_kind("AdapterAlias")[0], "spec.model", "globex/support:prod")
    (error,) = validate(committed_schema("AdapterAlias"), alias)
    assert error.startswith("spec: ")
    assert "(rule: self.model.startsWith(self.tenant + '/'))" in error


def test_pool_bounds_rule_uses_server_defaults():
    """min: 5 with max omitted: the API server defaults max to 4 before CEL runs."""
    pool = examples_of_kind("ReplicaPool")[0]
    pool = _set(pool, "spec.replicas", {"min": 5})
    schema = committed_schema("ReplicaPool")
    assert apply_defaults(schema, pool)["spec"]["replicas"] == {"min": 5, "max": 4}
    assert validate(schema, pool) == [
        "spec.replicas: replicas.min must be <= replicas.max (rule: self.min <= self.max)"
    ]


# --- updates: transition rules -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("spec.rank", 8),
        ("spec.weightsUri", "s3://elsewhere/acme/"),
        ("spec.checksum", "sha256:" + "0" * 64),
        ("spec.sizeBytes", 1),
        ("spec.targetModules", ["q_proj"]),
    ],
)
def test_changing_an_adapter_spec_is_refused(field, value):
    old = examples_of_kind("LoRAAdapter")[0]
    new = _set(old, field, value)
    schema = committed_schema("LoRAAdapter")
    assert validate(schema, new) == []  # a valid object on its own ...
    errors = validate(schema, new, old=old)  # ... but not as an update of `old`
    assert errors == [
        "spec: spec is immutable: publish a new version as a new LoRAAdapter "
        "(rule: self == oldSelf)"
    ]


def test_status_and_metadata_updates_are_allowed():
    old = examples_of_kind("LoRAAdapter")[0]
    new = _set(old, "status", {"phase": "Ready", "owners": ["p-1", "p-4"], "ownerCount": 2})
    new = _set(new, "metadata.labels", {"team": "x"})
    assert validate(committed_schema("LoRAAdapter"), new, old=old) == []


def test_transition_rules_are_skipped_on_create():
    schema = committed_schema("LoRAAdapter")
    doc = examples_of_kind("LoRAAdapter")[0]
    assert cel_errors(schema, doc) == []


def test_alias_deploy_is_an_allowed_update():
    old = examples_of_kind("AdapterAlias")[0]
    new = _set(old, "spec.adapter", "acme-support-v1")
    assert validate(committed_schema("AdapterAlias"), new, old=old) == []


@pytest.mark.parametrize(
    ("kind", "field", "value", "expected"),
    [
        (
            "AdapterAlias",
            "spec.model",
            "acme/support:staging",
            "spec.model: model is immutable: create a new AdapterAlias for another model name "
            "(rule: self == oldSelf)",
        ),
        (
            "AdapterAlias",
            "spec.tenant",
            "acme2",
            "spec.tenant: tenant is immutable: create a new AdapterAlias (rule: self == oldSelf)",
        ),
        (
            "ReplicaPool",
            "spec.baseModel.hash",
            "sha256:" + "1" * 64,
            "spec.baseModel.hash: baseModel.hash is immutable: a new base model is a new "
            "ReplicaPool (rule: self == oldSelf)",
        ),
    ],
)
def test_identity_fields_are_immutable(kind, field, value, expected):
    """An alias's model and tenant and a pool's base model hash name what the object is:
    changing them is a new object, so the API server refuses the update (but not a create)."""
    old = examples_of_kind(kind)[0]
    new = _set(old, field, value)
    schema = committed_schema(kind)
    errors = validate(schema, new, old=old)
    assert expected in errors
    if field != "spec.tenant":  # a new tenant alone breaks the model-prefix rule on create
        assert validate(schema, new) == []


def test_pool_changes_other_than_the_base_hash_are_allowed():
    old = examples_of_kind("ReplicaPool")[0]
    new = _set(old, "spec.baseModel.uri", "s3://elsewhere/llama/")
    new = _set(new, "spec.replicas.max", 30)
    assert validate(committed_schema("ReplicaPool"), new, old=old) == []


def test_invalid_status_is_refused():
    doc = _set(examples_of_kind("LoRAAdapter")[0], "status", {"phase": "Serving"})
    errors = validate(committed_schema("LoRAAdapter"), doc)
    assert any(e.startswith("status.phase: 'Serving' is not one of") for e in errors), errors


def test_example_files_are_commented_for_users():
    for path in sorted(Path(EXAMPLES).glob("*.yaml")):
        assert path.read_text().startswith("#"), f"{path.name} should open with a comment"


def test_api_docs_mention_every_spec_field():
    """docs/reference/api.md is the user's reference: a new spec field must be documented
    there."""
    from lorafleet_core.api.crd_validation import schema_of

    text = (EXAMPLES.parent / "docs" / "reference" / "api.md").read_text()
    missing = [
        f"{kind}.spec.{field}"
        for kind in MODELS
        for field in schema_of(kind)["properties"]["spec"]["properties"]
        if f"spec.{field}" not in text
    ]
    assert missing == []


def test_offline_validation_command(tmp_path, capsys):
    """`lorafleet validate FILE...`: examples pass, a bad file is named."""
    from lorafleet_cli.main import main

    assert main(["validate", *(str(p) for p in sorted(EXAMPLES.glob("*.yaml")))]) == 0
    bad = tmp_path / "bad.yaml"
    alias = _set(examples_of_kind("AdapterAlias")[0], "spec.model", "globex/support:prod")
    bad.write_text("---\n".join(yaml.safe_dump(d) for d in (alias, {"kind": "ConfigMap"})))
    assert main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"{bad}: AdapterAlias/acme-support-prod: spec: model must start with '<spec.tenant>/': "
        "an alias can only name its own tenant's models "
        "(rule: self.model.startsWith(self.tenant + '/'))"
    ]
