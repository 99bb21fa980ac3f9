"""Tenant API keys: hashes only, Secret round trips, constant-time lookup."""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest
from pydantic import ValidationError

from lorafleet_core.api.apikeys import KEY_PREFIX, KeyIndex, TenantKeys, generate_key, hash_key
from lorafleet_core.api.names import API_KEYS_SECRET_LABEL


def test_generated_keys_are_random_and_prefixed():
    keys = {generate_key() for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        assert key.startswith(KEY_PREFIX)
        assert len(key) >= len(KEY_PREFIX) + 43  # 32 random bytes, base64url


def test_hash_format():
    h = hash_key("lf-abc")
    assert h == "sha256:" + hashlib.sha256(b"lf-abc").hexdigest()
    assert hash_key("lf-abc") == h
    assert hash_key("lf-abd") != h


def test_secret_holds_hashes_only_and_round_trips():
    key = generate_key()
    tenant = TenantKeys(tenant="acme", key_hashes=(hash_key(key),), requests_per_second=5.0)
    secret = tenant.to_secret(namespace="lorafleet")
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["labels"] == {API_KEYS_SECRET_LABEL: "true"}
    assert secret["metadata"]["namespace"] == "lorafleet"
    assert key not in json.dumps(secret)
    assert TenantKeys.from_secret(secret) == tenant


def test_secret_as_read_from_the_api_uses_base64_data():
    h1, h2 = hash_key("one"), hash_key("two")
    data = {"tenant": "acme", "keyHashes": f"{h1}\n{h2}\n", "tokensPerMinute": "1000"}
    secret = {"data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
    tenant = TenantKeys.from_secret(secret)
    assert tenant.key_hashes == (h1, h2)
    assert tenant.tokens_per_minute == 1000
    assert tenant.requests_per_second is None


@pytest.mark.parametrize(
    "fields",
    [
        {"tenant": "acme", "key_hashes": ()},
        {"tenant": "acme", "key_hashes": ("lf-plaintext-key",)},
        {"tenant": "acme", "key_hashes": ("sha256:abc",)},
        {"tenant": "Acme", "key_hashes": (hash_key("k"),)},
        {"tenant": "acme", "key_hashes": (hash_key("k"),), "requests_per_second": 0},
        {"tenant": "acme", "key_hashes": (hash_key("k"),), "requests_per_second": "inf"},
        {"tenant": "acme", "key_hashes": (hash_key("k"),), "requests_per_second": "nan"},
        {"tenant": "acme\n", "key_hashes": (hash_key("k"),)},
    ],
)
def test_invalid_tenant_keys_are_refused(fields):
    with pytest.raises(ValidationError):
        TenantKeys(**fields)


def test_index_finds_the_tenant_of_a_key():
    acme_key, acme_new, globex_key = generate_key(), generate_key(), generate_key()
    index = KeyIndex(
        [
            TenantKeys(tenant="acme", key_hashes=(hash_key(acme_key), hash_key(acme_new))),
            TenantKeys(tenant="globex", key_hashes=(hash_key(globex_key),)),
        ]
    )
    assert len(index) == 3
    found = index.tenant_for(acme_key)
    assert found is not None
    assert found.tenant == "acme"
    assert index.tenant_for(acme_new) is found  # rotation: both keys work
    globex = index.tenant_for(globex_key)
    assert globex is not None
    assert globex.tenant == "globex"
    assert index.tenant_for(generate_key()) is None
    assert index.tenant_for("") is None
    # The hash itself is not a key.
    assert index.tenant_for(hash_key(acme_key)) is None


def test_key_listed_under_two_tenants_is_refused_for_both_and_reported(
    caplog: pytest.LogCaptureFixture,
):
    shared, own = generate_key(), generate_key()
    with caplog.at_level(logging.ERROR, logger="lorafleet_core.api.apikeys"):
        index = KeyIndex(
            [
                TenantKeys(tenant="acme", key_hashes=(hash_key(shared), hash_key(own))),
                TenantKeys(tenant="globex", key_hashes=(hash_key(shared),)),
            ]
        )
    assert index.tenant_for(shared) is None  # neither: any choice could be the wrong tenant
    found = index.tenant_for(own)
    assert found is not None
    assert found.tenant == "acme"
    assert [c.tenants for c in index.conflicts] == [("acme", "globex")]
    assert "acme, globex" in caplog.text
    assert hash_key(shared) not in caplog.text  # reported shortened


def test_same_key_in_two_secrets_of_one_tenant_is_no_conflict():
    key = generate_key()
    index = KeyIndex([TenantKeys(tenant="acme", key_hashes=(hash_key(key), hash_key(key)))])
    assert index.conflicts == ()
    assert index.tenant_for(key) is not None
