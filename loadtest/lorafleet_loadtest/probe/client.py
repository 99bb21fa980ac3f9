"""One streaming chat completion through the gateway with the official `openai` client.

TTFT is measured to the first chunk that carries text (what a user sees), total time to the
end of the stream; headers give the adapter id, tier and replica; usage comes from the final
chunk (`stream_options.include_usage`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import openai

from lorafleet_core.wire.headers import HEADER_ADAPTER_ID, HEADER_ADAPTER_TIER, HEADER_REPLICA_ID
from lorafleet_loadtest.probe.results import RequestResult, marker_matches

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_KEY_FILE = Path(".lorafleet/demo-api-key")
DEFAULT_MANIFESTS = Path(".lorafleet/manifests")


def manifests_for(gateway: str, given: Path | None) -> Path | None:
    """Where aliases and markers come from: `--manifests`, else the local `lorafleet up`'s
    folder when the gateway is that `up`'s default one (a remote gateway's aliases are not
    in a local folder)."""
    if given is not None:
        return given
    if base_url(gateway) == DEFAULT_BASE_URL and DEFAULT_MANIFESTS.is_dir():
        return DEFAULT_MANIFESTS
    return None


def make_client(base_url: str, api_key: str, timeout_s: float) -> openai.AsyncOpenAI:
    # No client retries: a 429 or 503 is a measurement, not something to hide.
    return openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout_s)


def base_url(gateway: str) -> str:
    """The OpenAI base URL of a gateway given with or without its `/v1`."""
    url = gateway.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def read_key(key_file: Path | None, env: str = "LORAFLEET_API_KEY") -> str:
    """The key from `key_file`, else `$env`, else the demo's key file; never from argv (`ps`
    shows a command line to every user). ValueError when there is none."""
    if key_file is None and os.environ.get(env):
        return os.environ[env].strip()
    path = key_file or DEFAULT_KEY_FILE
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise ValueError(f"cannot read the API key: {exc}") from exc
    if not key:
        raise ValueError(f"{path} is empty")
    return key


async def stream_chat(
    client: openai.AsyncOpenAI,
    *,
    index: int,
    alias: str,
    prompt: str,
    max_tokens: int,
    marker: str | None,
    scheduled_at: float,
    run_t0: float,
    temperature: float = 0.0,
    extra_body: dict[str, object] | None = None,
    on_first_token: Callable[[], None] | None = None,
) -> RequestResult:
    """`on_first_token` runs when the first text arrives (the calibration's CPU probe reads
    the processes' CPU times there)."""
    started = time.perf_counter()
    res = RequestResult(index, alias, scheduled_at, started - run_t0, status="?")
    parts: list[str] = []
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=alias,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=temperature,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=extra_body,
        )
        res.adapter_id = raw.headers.get(HEADER_ADAPTER_ID)
        res.tier = raw.headers.get(HEADER_ADAPTER_TIER)
        res.replica = raw.headers.get(HEADER_REPLICA_ID)
        stream = raw.parse()
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].finish_reason:
                res.finish_reason = chunk.choices[0].finish_reason
            if chunk.choices and chunk.choices[0].delta.content:
                if res.ttft_s is None:
                    res.ttft_s = time.perf_counter() - started
                    if on_first_token is not None:
                        on_first_token()
                parts.append(chunk.choices[0].delta.content)
            if chunk.usage is not None:
                res.prompt_tokens = chunk.usage.prompt_tokens
                res.completion_tokens = chunk.usage.completion_tokens
        res.status = str(raw.status_code)
    except openai.APIStatusError as exc:
        res.status, res.error = str(exc.status_code), _short(exc)
    except openai.APITimeoutError as exc:
        res.status, res.error = "timeout", _short(exc)
    except openai.APIConnectionError as exc:
        res.status, res.error = "connection", _short(exc)
    except openai.APIError as exc:  # an SSE error event after the first byte
        res.status, res.error = "stream_error", _short(exc)
    res.total_s = time.perf_counter() - started
    res.text = "".join(parts)
    if res.ok:
        if res.ttft_s is None:  # an empty answer: first byte == end
            res.ttft_s = res.total_s
        res.marker_ok = marker_matches(res.text, marker, truncated=res.finish_reason == "length")
    return res


def _short(exc: Exception) -> str:
    return str(exc).replace("\n", " ")[:200]
