"""The real-stack half of the simulator's calibration: probes and a trace replay (I/O).

Against a running `lorafleet up` (`e2e.standalone_fleet.started_fleet`), measured through the
gateway with the official `openai` client, with vLLM's own `/metrics` read beside it:

- `probe_prefill`: sequential single requests of one hot (GPU-slot) alias at several prompt
  lengths, one output token each. vLLM's `time_to_first_token_seconds` (engine arrival to first
  token) against the prompt's tokens gives the prefill rate; the client's TTFT minus vLLM's is
  the fixed request path (gateway, agent, vLLM's HTTP front end, SSE back).
- `probe_decode`: k streams at once over the two hottest aliases (both in GPU slots), up to 64
  tokens each (the canaries stop after their ~9-token marker); vLLM's
  `inter_token_latency_seconds` and the client's (total - TTFT) / (n - 1) give the time per
  output token at batch k, and a line through them the per-sequence cost of a step.
- `replay`: the load test's plan (`lorafleet_loadtest.plan`) sent open loop
  (`lorafleet_loadtest.driver.replay`).

Each measured request is returned as a plain dict so the calibration JSON can be re-read
without vLLM (`benchmarks/sim_calibration.py --from`).
"""

from __future__ import annotations

import asyncio
import os
import re
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
import openai

from lorafleet_loadtest.driver import Target
from lorafleet_loadtest.driver import replay as send_plan
from lorafleet_loadtest.plan import PlannedRequest, prompt_text
from lorafleet_loadtest.probe.client import make_client, stream_chat
from lorafleet_loadtest.probe.results import RequestResult

_SAMPLE = re.compile(r"^(vllm:[a-z_]+)(?:\{[^}]*\})? ([0-9.eE+-]+)$")
TOKENS_PER_WORD = 2.4  # e2e.loadtest's default for the demo tokenizer


def scrape(vllm_url: str) -> dict[str, float]:
    """vLLM's metrics, label sets summed (one model, one engine)."""
    text = httpx.get(f"{vllm_url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def _delta(after: dict[str, float], before: dict[str, float], name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


async def _one(
    client: openai.AsyncOpenAI, alias: str, tokens: int, max_tokens: int, index: int
) -> RequestResult:
    return await stream_chat(
        client,
        index=index,
        alias=alias,
        prompt=prompt_text(tokens, index, TOKENS_PER_WORD),
        max_tokens=max_tokens,
        marker=None,
        scheduled_at=0.0,
        run_t0=time.perf_counter(),
    )


async def _prefill_rows(
    target: Target, vllm_url: str, lengths: Sequence[int], reps: int
) -> list[dict[str, float]]:
    # One client for every probe, as the replay has: a fresh client's first request pays for
    # its connection and the client's own set-up, which no replayed request does.
    client = make_client(target.base_url, target.api_key, 120.0)
    alias = target.aliases[0]
    rows: list[dict[str, float]] = []
    try:
        for i in range(3):  # into a GPU slot; warm connections
            await _one(client, alias, 8, 2, i)
        for rep in range(reps):
            for n in lengths:
                before = await asyncio.to_thread(scrape, vllm_url)
                res = await _one(client, alias, n, 1, 1000 + rep * 10 + n)
                after = await asyncio.to_thread(scrape, vllm_url)
                if not res.ok or res.ttft_s is None:
                    continue
                rows.append(
                    {
                        "prompt_tokens": float(res.prompt_tokens or 0),
                        "client_ttft_s": res.ttft_s,
                        "vllm_ttft_s": _delta(
                            after, before, "vllm:time_to_first_token_seconds_sum"
                        ),
                        "vllm_prefill_s": _delta(
                            after, before, "vllm:request_prefill_time_seconds_sum"
                        ),
                        "vllm_queue_s": _delta(
                            after, before, "vllm:request_queue_time_seconds_sum"
                        ),
                    }
                )
    finally:
        await client.close()
    return rows


def _median_by(rows: list[dict[str, float]], x: str, y: str) -> tuple[list[float], list[float]]:
    """Per prompt length (within 10 tokens), the median y: the fit then resists the stalls of
    a shared machine."""
    groups: dict[int, list[dict[str, float]]] = {}
    for r in rows:
        groups.setdefault(round(r[x] / 10), []).append(r)
    xs = [statistics.median(g[x] for g in grp) for grp in groups.values()]
    ys = [statistics.median(g[y] for g in grp) for grp in groups.values()]
    return xs, ys


def probe_prefill(
    target: Target, vllm_url: str, lengths: Sequence[int] = (4, 32, 64, 110, 160), reps: int = 6
) -> dict[str, Any]:
    rows = asyncio.run(_prefill_rows(target, vllm_url, lengths, reps))
    a_pre, b_pre = fit_line(*_median_by(rows, "prompt_tokens", "vllm_prefill_s"))
    a_ttft, b_ttft = fit_line(*_median_by(rows, "prompt_tokens", "vllm_ttft_s"))
    path = [r["client_ttft_s"] - r["vllm_ttft_s"] for r in rows]
    return {
        "alias": target.aliases[0],
        "rows": rows,
        "prefill_fit_s": [a_pre, b_pre],  # vLLM prefill time = a + b * prompt tokens
        "vllm_ttft_fit_s": [a_ttft, b_ttft],
        "prefill_tps": 1.0 / b_pre if b_pre > 0 else float("inf"),
        "path_s_median": statistics.median(path),
        "client_ttft_median_s": statistics.median(r["client_ttft_s"] for r in rows),
    }


def _tpot(r: RequestResult) -> float | None:
    """The client's time per output token after the first, when it streamed more than one."""
    n = r.completion_tokens or 0
    if not r.ok or r.ttft_s is None or r.total_s is None or n < 2:
        return None
    return (r.total_s - r.ttft_s) / (n - 1)


async def _decode_rounds(
    target: Target, vllm_url: str, batches: Sequence[int], reps: int, max_tokens: int
) -> dict[str, Any]:
    client = make_client(target.base_url, target.api_key, 120.0)
    hot = target.aliases[:2]
    out: dict[str, Any] = {}
    try:
        await asyncio.gather(*(_one(client, a, 8, 2, i) for i, a in enumerate(hot)))
        for k in batches:
            itl: list[float] = []
            tpot: list[float] = []
            tokens: list[int] = []
            for rep in range(reps):
                base = 5000 + k * 100 + rep * 20  # distinct prompts: no prefix-cache hits
                before = await asyncio.to_thread(scrape, vllm_url)
                results = await asyncio.gather(
                    *(_one(client, hot[i % len(hot)], 16, max_tokens, base + i) for i in range(k))
                )
                after = await asyncio.to_thread(scrape, vllm_url)
                n = _delta(after, before, "vllm:inter_token_latency_seconds_count")
                if n:
                    itl.append(_delta(after, before, "vllm:inter_token_latency_seconds_sum") / n)
                tpot += [t for t in map(_tpot, results) if t is not None]
                tokens += [r.completion_tokens or 0 for r in results]
            out[str(k)] = {
                "client_tpot_s": statistics.median(tpot) if tpot else None,
                "vllm_itl_s": statistics.median(itl) if itl else None,
                "completion_tokens_mean": sum(tokens) / max(1, len(tokens)),
            }
    finally:
        await client.close()
    return out


def probe_decode(
    target: Target,
    vllm_url: str,
    batches: Sequence[int] = (1, 2, 4, 8, 16),
    reps: int = 3,
    max_tokens: int = 64,
) -> dict[str, Any]:
    """Time per output token at batch k; `fit_s` = (a, b) of ITL = a + b * k."""
    out = asyncio.run(_decode_rounds(target, vllm_url, batches, reps, max_tokens))
    ks = [float(k) for k, v in out.items() if v["vllm_itl_s"]]
    ys = [out[str(int(k))]["vllm_itl_s"] for k in ks]
    return {"batches": out, "fit_s": list(fit_line(ks, ys))}


def replay(
    target: Target, plan: list[PlannedRequest], vllm_url: str
) -> tuple[list[dict[str, Any]], float, dict[str, float]]:
    """Send the plan open loop; every request's result as a dict, and vLLM's own means over
    the replay (diagnostics only: the simulator is fed from the probes, not from these)."""
    before = scrape(vllm_url)
    results, elapsed = asyncio.run(
        send_plan(
            target,
            plan,
            concurrency=max(1, len(plan)),  # never hold a request back on the client
            timeout_s=120.0,
            tokens_per_word=TOKENS_PER_WORD,
            progress=False,
        )
    )
    rows = [
        {
            "index": r.index,
            "alias": r.alias,
            "scheduled_at": r.scheduled_at,
            "started_at": r.started_at,
            "status": r.status,
            "ttft_s": r.ttft_s,
            "total_s": r.total_s,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "tier": r.tier,
            "adapter_id": r.adapter_id,
        }
        for r in results
    ]
    after = scrape(vllm_url)
    engine: dict[str, float] = {}
    for name in ("inter_token_latency", "request_prefill_time", "time_to_first_token",
                 "request_queue_time"):  # fmt: skip
        n = _delta(after, before, f"vllm:{name}_seconds_count")
        engine[f"{name}_mean_s"] = _delta(after, before, f"vllm:{name}_seconds_sum") / n if n else 0
    return rows, elapsed, engine


def load_average() -> float:
    return os.getloadavg()[0]
