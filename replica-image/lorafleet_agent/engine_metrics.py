"""vLLM's own metrics, served on the agent's internal port next to the agent's.

vLLM listens on the pod's loopback, so Prometheus and external schedulers (the Gateway API
Inference Extension reads `vllm:num_requests_waiting`, `vllm:kv_cache_usage_perc` and
`vllm:lora_requests_info` from a model server) can only reach it through the agent. What passes
is bounded by vLLM's own label sets (model, engine, finished reason, bucket), never by anything a
tenant controls:

- only the `vllm:` families: the engine's process and Python runtime series would collide with
  names a process exporter owns;
- no `_created` samples, as for lorafleet's own (lorafleet_core.web.exposition);
- of `vllm:lora_requests_info`, only its newest sample. vLLM keeps one sample per combination of
  running and waiting adapters it has ever seen, each valued with the time it was last set;
  readers take the newest, and the older ones would grow with the number of adapter sets.
"""

from __future__ import annotations

ENGINE_PREFIX = b"vllm:"
LORA_INFO = b"vllm:lora_requests_info"


def engine_families(text: bytes) -> bytes:
    """The `vllm:` families of a Prometheus text exposition, comments and samples, in order,
    with the rules above."""
    kept: list[bytes] = []
    newest_lora: tuple[float, int] | None = None  # (value, index in kept)
    for line in text.splitlines():
        comment = line.startswith((b"# HELP ", b"# TYPE "))
        name = line[7:] if comment else line
        if not name.startswith(ENGINE_PREFIX):
            continue
        if comment:
            kept.append(line)
            continue
        sample = name.split(b"{", 1)[0].split(b" ", 1)[0]
        if sample.endswith(b"_created"):
            continue
        if sample == LORA_INFO:
            value = _value(line)
            if newest_lora is not None and value <= newest_lora[0]:
                continue
            if newest_lora is not None:
                kept[newest_lora[1]] = b""
            newest_lora = (value, len(kept))
        kept.append(line)
    lines = [line for line in kept if line]
    return b"\n".join(lines) + b"\n" if lines else b""


def _value(sample: bytes) -> float:
    try:
        return float(sample.rsplit(b" ", 1)[1])
    except (IndexError, ValueError):
        return float("-inf")
