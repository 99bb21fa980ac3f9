"""The internal credential check (pure: a token or a token file, no server)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from lorafleet_agent.internal_auth import InternalAuth, MissingCredential


def test_only_the_exact_bearer_token_passes() -> None:
    auth = InternalAuth(SecretStr("s3cret"), None, allow_unauthenticated=False)
    assert auth.allows("Bearer s3cret")
    assert auth.allows("bearer s3cret")  # the scheme is case-insensitive (RFC 7235)
    for bad in (None, "", "Bearer", "Bearer ", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret"):
        assert not auth.allows(bad), bad


def test_a_token_file_is_re_read_when_the_secret_rotates(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    auth = InternalAuth(None, path, allow_unauthenticated=False)
    assert auth.allows("Bearer first")
    path.write_text("second\n")
    os.utime(path, (1, 1))  # a different mtime, as the kubelet's symlink swap gives
    assert auth.allows("Bearer second")
    assert not auth.allows("Bearer first")


def test_an_empty_or_missing_token_file_refuses_everything(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("")
    auth = InternalAuth(None, path, allow_unauthenticated=False)
    assert not auth.allows("Bearer ")
    assert not auth.allows("Bearer x")
    path.unlink()
    assert not auth.allows("Bearer x")


def test_no_credential_configured_is_refused_unless_explicitly_allowed() -> None:
    with pytest.raises(MissingCredential):
        InternalAuth(None, None, allow_unauthenticated=False)
    assert InternalAuth(None, None, allow_unauthenticated=True).allows(None)
