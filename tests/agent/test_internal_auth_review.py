"""`internal_auth=tokenReview`: the agent checks its callers' ServiceAccount tokens with the
API server (an emulated one: kmock plus a TokenReview handler, tests/agent/kube_emulation.py).

A real agent serves its internal port over real HTTP; no vLLM is needed for what is checked
here (an unload of an adapter the agent does not hold is accepted without touching vLLM, and
a load that passed authentication stops at "engine not ready"). The full path with vLLM and
the record-conflict Event is in test_agent_cluster.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_agent.internal_auth import MissingCredential
from lorafleet_agent.kube import AgentKube
from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings
from lorafleet_core.kube.token_review import TokenReviewer
from tests.agent.kube_emulation import (
    AUDIENCE,
    GATEWAY_SA,
    OPERATOR_SA,
    TokenReviews,
    emulated_cluster,
)
from tests.agent_thread import RunningAgent, agent_in_thread
from tests.conftest import free_port
from tests.operator.kmock_cluster import Cluster

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def kube() -> Iterator[tuple[Cluster, TokenReviews]]:
    yield from emulated_cluster()


def settings(tmp_path: Path, api_server: str, **overrides: Any) -> AgentSettings:
    values: dict[str, Any] = {
        "replica_id": "r0",
        "vllm_url": f"http://127.0.0.1:{free_port()}",  # no engine: auth is what is tested
        "cache_dir": tmp_path / "cache",
        "host": "127.0.0.1",
        "data_port": 0,
        "internal_port": 0,
        "internal_auth": "tokenReview",
        "internal_audience": AUDIENCE,
        "internal_service_accounts": f"{GATEWAY_SA},{OPERATOR_SA}",
        "kube_api_server": api_server,
        "data_token": "data-token-unused-here",
    }
    values.update(overrides)
    return AgentSettings(**values)


@pytest.fixture
def agent(tmp_path: Path, kube: tuple[Cluster, TokenReviews]) -> Iterator[RunningAgent]:
    with agent_in_thread(settings(tmp_path, kube[0].url), wait_ready=False) as running:
        yield running


def unload(agent: RunningAgent, token: str | None, adapter_id: str = "zebra-1") -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.post(
        f"{agent.internal_url}/internal/replicas/r0/adapters/{adapter_id}/unload",
        headers=headers,
        timeout=10,
    )


def test_tokens_of_the_allowed_service_accounts_are_accepted(agent):
    for token in ("gateway-token", "operator-token"):
        resp = unload(agent, token)
        assert resp.status_code == 200, resp.text
        assert resp.json()["adapter_id"] == "zebra-1"
    # A load passes authentication too; it then waits for the engine, which is not there.
    load = httpx.post(
        f"{agent.internal_url}/internal/replicas/r0/adapters/zebra-1/load",
        json={"record": {}, "gpu": False},
        headers={"authorization": "Bearer gateway-token"},
        timeout=10,
    )
    assert load.status_code != 401
    assert load.json()["error"]["code"] != "unauthorized"


@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("gateway-api-token", "not authenticated"),  # the gateway's token for another audience
        ("webhook-token", f"not issued for {AUDIENCE}"),  # an authenticator ignoring audiences
        ("stranger-token", "someone-else is not an allowed ServiceAccount"),
        ("made-up-token", "not authenticated"),
        (None, "a valid internal credential is required"),
    ],
)
def test_wrong_audience_unknown_account_and_unauthenticated_tokens_get_401(agent, token, why):
    resp = unload(agent, token)
    assert resp.status_code == 401, resp.text
    assert resp.headers["www-authenticate"] == "Bearer"
    error = resp.json()["error"]
    assert error["code"] == "unauthorized"
    assert why in error["message"]
    if token:
        assert token not in resp.text  # the body names the failed check, never the token


def test_a_basic_scheme_or_an_empty_bearer_is_refused_without_asking_the_api_server(agent, kube):
    reviews = kube[1]
    before = len(reviews.asked)
    for header in ("Basic gateway-token", "Bearer", "gateway-token"):
        resp = httpx.post(
            f"{agent.internal_url}/internal/replicas/r0/adapters/a/unload",
            headers={"authorization": header},
            timeout=10,
        )
        assert resp.status_code == 401
    assert len(reviews.asked) == before


def test_the_api_server_down_fails_closed_with_503_and_says_why(tmp_path):
    down = f"http://127.0.0.1:{free_port()}"
    with agent_in_thread(settings(tmp_path, down), wait_ready=False) as agent:
        resp = unload(agent, "gateway-token")
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "auth_unavailable"
    assert "could not verify" in error["message"]
    assert "fail closed" in error["message"]


def test_token_review_without_allowed_accounts_refuses_to_start(tmp_path, kube):
    with pytest.raises(MissingCredential):
        Agent(settings(tmp_path, kube[0].url, internal_service_accounts=""))


async def test_positive_reviews_are_cached_briefly_by_hash_and_the_cache_is_bounded(kube):
    cluster, reviews = kube
    api = AgentKube(cluster.url)
    now = [1000.0]
    reviewer = TokenReviewer(
        api.api,
        accounts={GATEWAY_SA, OPERATOR_SA},
        audiences=(AUDIENCE,),
        cache_s=30,
        cache_max=1,
        clock=lambda: now[0],
    )
    try:
        start = reviews.count("gateway-token")
        for _ in range(5):
            assert (await reviewer.check("gateway-token")).allowed
        assert reviews.count("gateway-token") == start + 1  # one review, four cache hits
        now[0] += 31  # past the cache time: asked again
        assert (await reviewer.check("gateway-token")).allowed
        assert reviews.count("gateway-token") == start + 2
        # Bounded (1 entry here): the operator's token pushes the gateway's out.
        assert (await reviewer.check("operator-token")).allowed
        assert (await reviewer.check("gateway-token")).allowed
        assert reviews.count("gateway-token") == start + 3
        # Refusals are not cached: each is asked again (a token may become valid).
        strangers = reviews.count("stranger-token")
        assert not (await reviewer.check("stranger-token")).allowed
        assert not (await reviewer.check("stranger-token")).allowed
        assert reviews.count("stranger-token") == strangers + 2
        # The cache holds digests, never a token.
        assert "gateway-token" not in repr(vars(reviewer))
    finally:
        await api.aclose()
