"""The generated CRDs: no drift from the models, structural, valid CRD objects, usable names."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml

from lorafleet_core.api import crds, names
from lorafleet_core.api.models.alias import SPLIT_PRIMARY_RULE, SPLIT_SUM_RULE
from lorafleet_core.api.models.engine_args import EXTRA_ARGS_RULE

from .conftest import CRDS, REPO

KUBERNETES_VERSION = "1.30"  # ValidatingAdmissionPolicy-era CEL; our oldest supported cluster

COMMITTED = {
    p.name: yaml.safe_load(p.read_text().split("---\n", 1)[1]) for p in CRDS.glob("*.yaml")
}


def all_schemas() -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        for name, crd in sorted(COMMITTED.items())
    ]


def walk(node: dict[str, Any], path: str = ""):
    """Yield (path, node) for every schema node."""
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


# --- drift ------------------------------------------------------------------------------------


def test_committed_crds_match_the_models():
    """Fails when models.py changed without `lorafleet crds` (or someone edited crds/ by hand)."""
    generated = crds.generate()
    assert set(generated) == {p.name for p in CRDS.glob("*.yaml")}
    for name, text in generated.items():
        assert (CRDS / name).read_text() == text, f"crds/{name} is stale: run `lorafleet crds`"


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_yaml_parses_back_to_the_manifest(resource):
    """The custom dumper (block style for multi-line descriptions) loses nothing."""
    assert COMMITTED[resource.file_name] == crds.crd_manifest(resource)


def test_check_mode_reports_stale_files(tmp_path):
    assert crds.main(["--out", str(CRDS), "--check"]) == 0
    assert crds.main(["--out", str(tmp_path), "--check"]) == 1
    (tmp_path / "x").mkdir()
    crds.write_crds(tmp_path / "x")
    target = tmp_path / "x" / "lorafleet.dev_loraadapters.yaml"
    target.write_text(target.read_text().replace("maximum: 256", "maximum: 512"))
    assert crds.stale_files(tmp_path / "x") == ["lorafleet.dev_loraadapters.yaml"]


def test_cli_writes_the_same_files(tmp_path):
    """`lorafleet crds` end to end, through the console entry point's module."""
    out = tmp_path / "crds"
    result = subprocess.run(
        [sys.executable, "-m", "lorafleet_cli.main", "crds", "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(p.name for p in CRDS.glob("*.yaml"))
    assert len(result.stdout.splitlines()) == 3
    for name in written:
        assert (out / name).read_bytes() == (CRDS / name).read_bytes()


# --- the CRD objects ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_crd_is_a_valid_kubernetes_object(name):
    """kubernetes-validate checks the CRD against apiextensions.k8s.io/v1 (strict: no unknown
    keys anywhere, e.g. a `const` or `$ref` the generator failed to translate)."""
    kubernetes_validate.validate(COMMITTED[name], KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize(("key", "value"), [("const", 1), ("exclusiveMinimum", 0)])
def test_strict_validation_would_catch_untranslated_json_schema(key, value):
    """What pydantic emits verbatim (`const`, numeric exclusiveMinimum) is not a valid CRD."""
    bad = yaml.safe_load(yaml.safe_dump(COMMITTED["lorafleet.dev_loraadapters.yaml"]))
    schema = bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema["properties"]["spec"]["properties"]["rank"][key] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES_VERSION, strict=True)


def test_names_groups_and_subresources():
    by_kind = {crd["spec"]["names"]["kind"]: crd for crd in COMMITTED.values()}
    assert set(by_kind) == {"LoRAAdapter", "AdapterAlias", "ReplicaPool"}
    short = {k: c["spec"]["names"]["shortNames"] for k, c in by_kind.items()}
    assert short == {"LoRAAdapter": ["lora"], "AdapterAlias": ["alias"], "ReplicaPool": ["rpool"]}
    for kind, crd in by_kind.items():
        spec = crd["spec"]
        assert spec["group"] == names.GROUP
        assert crd["metadata"]["name"] == f"{spec['names']['plural']}.{names.GROUP}"
        assert spec["names"]["categories"] == ["lorafleet"]
        assert spec["scope"] == "Namespaced"
        (version,) = spec["versions"]
        assert version["name"] == names.VERSION
        assert version["served"]
        assert version["storage"]
        assert version["subresources"]["status"] == {}
        assert ("scale" in version["subresources"]) == (kind == "ReplicaPool")
    scale = by_kind["ReplicaPool"]["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas.desired",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }


def test_printer_columns_as_designed():
    columns = {
        crd["spec"]["names"]["kind"]: [
            c["name"]
            for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
            if not c.get("priority")
        ]
        for crd in COMMITTED.values()
    }
    assert columns["LoRAAdapter"] == [
        "Ready",
        "Tenant",
        "Version",
        "Rank",
        "Phase",
        "Owners",
        "Age",
    ]
    assert columns["AdapterAlias"] == [
        "Ready",
        "Model",
        "Serving",
        "Split",
        "Previous",
        "Deployed",
        "Age",
    ]
    assert columns["ReplicaPool"][0] == "Ready"
    assert columns["ReplicaPool"][-1] == "Age"


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_printer_column_paths_exist_in_the_schema(name):
    crd = COMMITTED[name]
    version = crd["spec"]["versions"][0]
    paths = {p for p, _ in walk(version["schema"]["openAPIV3Schema"])}
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path.startswith(".metadata."):
            continue
        # A condition column `.status.conditions[?(@.type=="X")].field` reads an item field.
        path = re.sub(r"\[\?\(@\.type==\"[A-Za-z]+\"\)\]", "[]", path)
        assert path in paths, column


# --- structural schema rules (what the API server refuses at install time) ---------------------


@pytest.mark.parametrize(("name", "schema"), all_schemas())
def test_schema_is_structural(name, schema):
    problems: list[str] = []
    for path, node in walk(schema):
        where = f"{name}:{path or '<root>'}"
        if node.get("x-kubernetes-int-or-string"):
            # The one untyped form a structural schema allows (Quantity, IntOrString).
            if node.get("anyOf") != [{"type": "integer"}, {"type": "string"}] or "type" in node:
                problems.append(f"{where}: int-or-string must be anyOf integer/string")
            continue
        for key in ("$ref", "anyOf", "oneOf", "allOf", "not", "const", "title", "$defs"):
            if key in node:
                problems.append(f"{where}: {key}")
        if "type" not in node:
            problems.append(f"{where}: no type")
        if node.get("additionalProperties") is False:
            problems.append(f"{where}: additionalProperties false")
        if "additionalProperties" in node and "properties" in node:
            problems.append(f"{where}: properties and additionalProperties together")
        for key in ("exclusiveMinimum", "exclusiveMaximum"):
            if key in node and not isinstance(node[key], bool):
                problems.append(f"{where}: {key} must be a boolean in OpenAPI v3.0")
        if node.get("x-kubernetes-preserve-unknown-fields") and node.get("type") != "object":
            problems.append(f"{where}: preserve-unknown-fields needs type object")
        list_type = node.get("x-kubernetes-list-type")
        if list_type is not None:
            items = node.get("items", {})
            if list_type == "set" and items.get("type") in ("object", "array"):
                problems.append(f"{where}: a set needs scalar items")
            if list_type == "map":
                keys = node.get("x-kubernetes-list-map-keys") or []
                if items.get("type") != "object" or not keys:
                    problems.append(f"{where}: a map list needs object items and map keys")
                for key in keys:
                    prop = items.get("properties", {}).get(key)
                    if prop is None or (
                        key not in items.get("required", []) and "default" not in prop
                    ):
                        problems.append(f"{where}: map key {key} must be required or defaulted")
        for req in node.get("required", []):
            if req not in node.get("properties", {}):
                problems.append(f"{where}: required {req} is not a property")
    assert problems == []


@pytest.mark.parametrize(("name", "schema"), all_schemas())
def test_metadata_is_restricted_only_in_its_name(name, schema):
    """A CRD may restrict metadata.name and nothing else of metadata (the API server refuses
    the CRD otherwise); ReplicaPool does, for the StatefulSet and Service it names."""
    props = schema["properties"]
    meta = dict(props["metadata"])
    name_schema = meta.pop("properties", {}).pop("name", None)
    assert meta == {"type": "object", "description": "Standard object metadata."}
    if name == "lorafleet.dev_replicapools.yaml":
        assert name_schema is not None
        assert name_schema["maxLength"] == 52
    else:
        assert name_schema is None
    assert props["apiVersion"]["type"] == props["kind"]["type"] == "string"
    assert schema["required"] == ["spec"]


@pytest.mark.parametrize(("name", "schema"), all_schemas())
def test_every_field_has_a_description(name, schema):
    """`kubectl explain <kind>.spec.<field>` prints these (map values and list items are not
    fields: it prints the map's or list's description)."""
    missing = [
        p
        for p, node in walk(schema)
        if p and not p.endswith(("[]", "{}")) and not node.get("description")
    ]
    assert missing == []


def reachable(rule: str, node: dict[str, Any], path: str):
    """The (path, node)s a rule can read: all of them for a rule comparing `self` whole, else
    its node, list items, and the properties the rule names (`v.name` in `self.all(v, ...)`:
    the API server's estimate follows what an expression reads)."""
    if "oldSelf" in rule or "self ==" in rule:
        yield from walk(node, path)
        return
    named = set(re.findall(r"\.([A-Za-z_]\w*)", rule))
    direct = {path, f"{path}[]"} | {f"{p}.{n}" for p in (path, f"{path}[]") for n in named}
    yield from ((p, sub) for p, sub in walk(node, path) if p in direct)


@pytest.mark.parametrize(("name", "schema"), all_schemas())
def test_cel_rules_compile_and_strings_under_rules_are_bounded(name, schema):
    """Every rule compiles; strings and lists a rule can reach carry maxLength/maxItems, which
    the API server needs to estimate the rule's cost."""
    rules = 0
    for path, node in walk(schema):
        for check in node.get("x-kubernetes-validations", []):
            rules += 1
            env = celpy.Environment()
            env.program(env.compile(check["rule"]))
            assert check["message"], path
            for sub_path, sub in reachable(check["rule"], node, path):
                if sub.get("type") == "string" and "enum" not in sub:
                    assert "maxLength" in sub or "pattern" in sub, sub_path
                if sub.get("type") == "array":
                    assert "maxItems" in sub, sub_path
    assert rules >= 1


def test_expected_rules_are_present():
    rules = {
        (name.split("_")[1].split(".")[0], path): [
            c["rule"] for c in node["x-kubernetes-validations"]
        ]
        for name, schema in all_schemas()
        for path, node in walk(schema)
        if "x-kubernetes-validations" in node
    }
    assert rules == {
        ("loraadapters", ".spec"): ["self == oldSelf"],
        ("adapteraliases", ".spec"): [
            "self.model.startsWith(self.tenant + '/')",
            SPLIT_PRIMARY_RULE,
            SPLIT_SUM_RULE,
        ],
        ("replicapools", ".spec.replicas"): ["self.min <= self.max"],
        ("adapteraliases", ".spec.model"): ["self == oldSelf"],
        ("adapteraliases", ".spec.tenant"): ["self == oldSelf"],
        ("replicapools", ".spec.baseModel.hash"): ["self == oldSelf"],
        ("replicapools", ".spec.engine.extraArgs"): [EXTRA_ARGS_RULE],
        ("replicapools", ".spec.template.volumes"): [
            "self.all(v, !(v.name in ['cache', 'dshm', 'podinfo', 'tmp']))"
        ],
        ("replicapools", ".spec.template.volumeMounts"): [
            "self.all(m, !(m.mountPath in "
            "['/dev/shm', '/etc/lorafleet/podinfo', '/tmp', '/var/cache/lorafleet']))"
        ],
    }


def test_constraints_survive_translation():
    schema = dict(all_schemas())["lorafleet.dev_loraadapters.yaml"]
    spec = schema["properties"]["spec"]["properties"]
    assert (spec["rank"]["minimum"], spec["rank"]["maximum"]) == (1, 256)
    assert spec["checksum"]["pattern"] == "^sha256:[0-9a-f]{64}$"
    assert spec["weightsUri"]["pattern"] == "^(s3|file)://.+$"
    assert spec["alpha"]["exclusiveMinimum"] is True
    assert spec["alpha"]["minimum"] == 0
    assert spec["targetModules"]["x-kubernetes-list-type"] == "set"
    status = schema["properties"]["status"]["properties"]
    assert status["conditions"]["items"]["properties"]["lastTransitionTime"] == {
        "type": "string",
        "format": "date-time",
        "description": "When status last changed (RFC 3339).",
    }
    assert status["phase"]["enum"] == ["Pending", "Ready", "Rejected", "Failed"]
    pool = dict(all_schemas())["lorafleet.dev_replicapools.yaml"]
    resources = pool["properties"]["spec"]["properties"]["engine"]["properties"]["resources"]
    # core/v1 ResourceRequirements, not a free-form object: quantities are int-or-string with
    # the API server's syntax.
    assert resources["type"] == "object"
    assert "x-kubernetes-preserve-unknown-fields" not in resources
    limit = resources["properties"]["limits"]["additionalProperties"]
    assert limit["x-kubernetes-int-or-string"] is True
    assert limit["pattern"].startswith("^(\\+|-)?")


def test_pod_template_fields_carry_the_core_v1_schemas():
    """No free-form objects where Kubernetes has a schema: a typo in a toleration is refused."""
    pool = dict(all_schemas())["lorafleet.dev_replicapools.yaml"]
    template = pool["properties"]["spec"]["properties"]["template"]["properties"]
    toleration = template["tolerations"]["items"]["properties"]
    assert set(toleration) == {"effect", "key", "operator", "tolerationSeconds", "value"}
    assert template["tolerations"]["maxItems"] == 64
    env = template["env"]
    assert env["x-kubernetes-list-type"] == "map"
    assert env["items"]["required"] == ["name"]
    assert "valueFrom" in env["items"]["properties"]
    node_affinity = template["affinity"]["properties"]["nodeAffinity"]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in node_affinity["properties"]
    assert template["imagePullSecrets"]["items"]["required"] == ["name"]
    free_form = [
        p
        for p, node in walk(pool["properties"]["spec"])
        if node.get("x-kubernetes-preserve-unknown-fields")
    ]
    # Only what Kubernetes itself leaves free-form (managedFields' FieldsV1) remains.
    assert all("managedFields" in p for p in free_form), free_form
