"""The engine families the agent passes on (lorafleet_agent.engine_metrics), on an exposition
shaped as vLLM writes it; tests/agent/test_agent_vllm.py checks the same against real vLLM."""

from __future__ import annotations

from lorafleet_agent.engine_metrics import engine_families
from tests.scrape import Scrape

VLLM_TEXT = b"""# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2e+09
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="base"} 3.0
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="base"} 7.0
vllm:num_preemptions_created{engine="0",model_name="base"} 1.7e+09
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a",waiting_lora_adapters=""} 1.0
vllm:lora_requests_info{max_lora="4",running_lora_adapters="a,b",waiting_lora_adapters="c"} 3.0
vllm:lora_requests_info{max_lora="4",running_lora_adapters="",waiting_lora_adapters=""} 2.0
"""


def test_only_vllm_families_pass_without_created_samples():
    out = Scrape.parse(engine_families(VLLM_TEXT).decode())
    assert set(out.families) == {
        "vllm:num_requests_waiting",
        "vllm:num_preemptions",
        "vllm:lora_requests_info",
    }
    assert out.value("vllm:num_requests_waiting") == 3
    assert out.value("vllm:num_preemptions_total") == 7
    assert b"_created" not in engine_families(VLLM_TEXT)


def test_only_the_newest_lora_requests_info_sample_passes():
    out = Scrape.parse(engine_families(VLLM_TEXT).decode())
    (newest,) = out.families["vllm:lora_requests_info"]
    assert newest.labels["running_lora_adapters"] == "a,b"
    assert newest.labels["waiting_lora_adapters"] == "c"


def test_an_exposition_without_engine_families_adds_nothing():
    assert engine_families(b"process_cpu_seconds_total 1.0\n") == b""
