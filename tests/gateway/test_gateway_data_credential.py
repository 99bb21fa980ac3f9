"""The agents' data-port credential as the gateway sends it (lorafleet_agent.data_auth): on every
completion, read again when its file rotates, never the client's own key; a replica refusing it
is a deployment error the client sees as a 502 and the log names.

The agent's side (refusals before the body, /healthz open) is tests/agent/test_agent_http_edge.py;
the whole path over real agents is every vllm_stack test (they all send it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import openai
import pytest

from tests.gateway.conftest import KEYS, MSG_DEFAULT, start_env, stop_env


def test_every_completion_carries_the_data_token_not_the_clients_key(tmp_path: Path):
    env = start_env(tmp_path, replica_data_token="data-token-1")
    try:
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT)
        stream = env.client("globex").chat.completions.create(
            model="globex/bot:prod", messages=MSG_DEFAULT, stream=True
        )
        assert list(stream)
        sent = [h for r in env.replicas.values() for h in r.request_headers]
        assert [h["authorization"] for h in sent] == ["Bearer data-token-1"] * 2
        assert not any(key in str(h) for h in sent for key in KEYS.values())
    finally:
        stop_env(env)


def test_a_rotated_data_token_file_is_sent_from_the_next_request_on(tmp_path: Path):
    token_file = tmp_path / "data-token"
    token_file.write_text("first\n")
    env = start_env(tmp_path, replica_data_token_file=token_file)
    try:
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT)
        token_file.write_text("second\n")
        os.utime(token_file, (1, 1))  # a new mtime, as the kubelet's atomic swap gives
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT)
        sent = [h["authorization"] for r in env.replicas.values() for h in r.request_headers]
        assert sent == ["Bearer first", "Bearer second"]
    finally:
        stop_env(env)


def test_a_replica_refusing_the_credential_is_a_502_and_an_error_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    env = start_env(tmp_path, n_replicas=1, replica_data_token="stale")
    try:
        replica = env.replicas["replica-0"]
        replica.fail_status, replica.fail_code = 401, "unauthorized"
        with (
            caplog.at_level(logging.ERROR, "lorafleet_gateway.upstream"),
            pytest.raises(openai.APIStatusError) as err,
        ):
            env.client().chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT)
        assert err.value.status_code == 502
        assert err.value.code == "upstream_error"  # the client learns nothing of the token
        assert "stale" not in str(err.value.body)
        assert "REPLICA_DATA_TOKEN" in caplog.text
        assert len(replica.requests) == 1  # answered, not retried
    finally:
        stop_env(env)
