"""Every number of the simulated fleet in one place, with the design's defaults and their source.

Times in seconds, sizes in bytes, rates per second. Defaults follow ../shared/DESIGN.md (a 7B
base on one GPU, rank-16 adapters of ~80 MB) unless the comment names another source; change
them with `lorafleet sim --set name=value` and state them with every result (the report does).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lorafleet_core.api.models.pool import DEFAULT_TARGET_TOKENS_IN_FLIGHT, CacheSpec
from lorafleet_core.planning.adapters import REPLICA_TOKENS_PER_SECOND
from lorafleet_gateway.router import MERGED_MAX_QUEUE_DEPTH, MERGED_MAX_TOKENS_IN_FLIGHT

MB = 1_000_000
DEFAULT_OWNED_ANNOTATION_MAX_BYTES = CacheSpec().owned_annotation_max_bytes


@dataclass(frozen=True, slots=True)
class ReplicaParams:
    """One replica: vLLM on one GPU plus its agent."""

    # vLLM --max-num-seqs: sequences in one continuous batch; more wait in vLLM's queue.
    max_seqs: int = 32
    # Prefill throughput of the GPU (design: 8,000 tokens/s). A step that carries prompt
    # chunks lasts batched_tokens / prefill_tps when that is longer than a decode step.
    prefill_tps: float = 8000.0
    # Time per output token (one decode step) with unmerged LoRA deltas (design: 50 ms; 40 ms
    # merged, which lorafleet does not do because one batch mixes many adapters).
    decode_s: float = 0.050
    # Extra step time per running sequence: a decode step lasts decode_s + this x sequences.
    # 0 on the design's GPU (a memory-bound step costs the same for 1 or 32 sequences); the
    # CPU replica computes every row itself, so its step grows with the batch (measured).
    decode_s_per_seq: float = 0.0
    # Fixed cost of a step that computes prompt chunks, before its per-token cost: such a step
    # lasts prefill_step_s + batched tokens / prefill_tps (or a decode step, if longer). 0 on
    # the design's GPU (the roofline max above); the CPU replica's prefill is additive (fit).
    prefill_step_s: float = 0.0
    decode_s_merged: float = 0.040
    # vLLM --max-num-batched-tokens: the per-step token budget shared by decodes (one token
    # each) and prefill chunks (chunked prefill; vLLM v1 default for online serving is 2,048).
    step_token_budget: int = 2048
    # vLLM --long-prefill-token-threshold: the most prompt tokens one request may put in a
    # step (0: no cap, vLLM's default with one partial prefill). A cap lets short prompts past
    # a long one's chunks. Not calibrated against the real engine yet: an experiment's knob.
    long_prefill_token_threshold: int = 0
    # --max-loras (GPU slots, design 250) and --max-cpu-loras (host RAM, design ~385). vLLM
    # also caps the distinct adapters among running sequences at --max-loras: a waiting request
    # of another adapter is skipped until one of them has no sequence left (binds only when
    # gpu_slots < max_seqs, as on the CPU demo's 2 slots; never at the design's 250 vs 32).
    gpu_slots: int = 250
    ram_slots: int = 385
    # The agent's disk cache budget (ReplicaPool spec.cache.diskBytes default 50 GiB).
    disk_bytes: int = 50 * 2**30
    adapter_bytes: int = 80 * MB
    # Load time by the tier the adapter was found in (design's tier table). The remote figure
    # is at full bandwidth: concurrent fetches on one replica share its object-store link
    # (remote_bandwidth = adapter_bytes / remote_s), so two at once take 0.8 s each.
    ram_s: float = 0.008
    disk_s: float = 0.040
    remote_s: float = 0.400
    # A new or restarted replica: base model start (design: 14 s), then the agent's warm-up
    # (pre-warming the adapters it owns) before the gateway sees it healthy.
    base_start_s: float = 14.0
    warmup_s: float = 10.0
    # Fixed time on a request's path outside vLLM's steps, added to its TTFT: the gateway's and
    # the agent's hops, vLLM's HTTP front end (tokenizing, first detokenize) and the stream back
    # to the client. Left out of the design's figures (0: a few ms beside a 50 ms step); on the
    # CPU stack it is measured (client TTFT minus vLLM's own, benchmarks/sim_calibration.py).
    path_s: float = 0.0
    # The host CPU the path outside the engine runs on (lorafleet_sim.host), per replica:
    # its node's cores beside the engine (in standalone mode on one machine also the gateway's
    # and the client's). 0 = unlimited, off: the design's GPU nodes have many cores, and the
    # design's figures are unchanged. When > 0, the path's CPU work is processor-shared on
    # host_cores with the competing threads below, and path_s is only its non-CPU part
    # (loopback, IPC waits). Measured by benchmarks/calibration_host_probe.py from the
    # processes' CPU times (gateway, agent, vLLM's API server, client): host_cores = CPUs
    # those processes may run on (2 on the calibration machine).
    host_cores: float = 0.0
    # Threads always competing for those cores: the fleet's idle CPU rate (the gateway's
    # state poll, the agent's pre-warm poll, the supervisor, vLLM idle), over an idle window.
    host_background: float = 0.0
    # More competing threads while the engine steps: vLLM's engine processes (the worker's
    # OMP threads, the EngineCore's scheduler loop) may run on the same cores; their CPU
    # above the idle rate per second of engine busy time (vLLM's inference time).
    host_engine_busy: float = 0.0
    # CPU-seconds of a request before its first token reaches the client (the hops' request
    # handling, tokenizing, the first chunk back through every hop), read from the processes'
    # CPU counters when the client sees the first token (concurrency 1, background subtracted).
    # The first chunk's way back costs host_token_cpu_s like any later token's and runs after
    # the engine's first token; the rest runs on the way in, before the engine sees it.
    host_ttft_cpu_s: float = 0.0
    # CPU-seconds per output token after the first, summed over the hops it streams through:
    # the slope of CPU per request against tokens per request (max_tokens 1 vs 8).
    host_token_cpu_s: float = 0.0
    # CPU-seconds of a request after its last token (usage records, closing the stream in
    # every hop): a one-token request's CPU minus host_ttft_cpu_s.
    host_end_cpu_s: float = 0.0
    # Stops of a process on the path (a full garbage collection of a heap holding torch,
    # a blocking call on an event loop): every 1 / host_pause_per_request arrivals the host
    # serves nothing for host_pause_s (0 = never). Measured by
    # benchmarks/calibration_stall_probe.py: pings to each hop's health endpoint under a
    # paced load of its own; a ping held longer than the hop's median is a stop.
    host_pause_per_request: float = 0.0
    host_pause_s: float = 0.0
    # Stops that come with adapter loads: every 1 / host_pause_per_load registrations with
    # vLLM (an adapter brought from disk or the object store) the host serves nothing for
    # host_pause_load_s, from the registration on; the engine keeps generating, so streams
    # through the host are held and then delivered at once (0 = never). Measured by
    # benchmarks/calibration_stall_probe.py run over more aliases than RAM slots (load_fit).
    host_pause_per_load: float = 0.0
    host_pause_load_s: float = 0.0
    # Stops that come with the engine's busy time, where its threads share the path's cores
    # (the CPU stack's `shared` layout: vLLM's EngineCore and worker busy-poll their queues
    # while it steps and the path's processes are descheduled for 100+ ms at a time): every
    # 1 / host_pause_per_busy_s seconds of engine stepping the host serves nothing for
    # host_pause_busy_s (0 = never). Measured by benchmarks/calibration_stall_probe.py with
    # and without a stream keeping the engine busy (busy_fit). 0 on a GPU node and in the
    # `pinned` layout, where the engine has cores of its own.
    host_pause_per_busy_s: float = 0.0
    host_pause_busy_s: float = 0.0

    @property
    def remote_bandwidth(self) -> float:
        return self.adapter_bytes / self.remote_s


@dataclass(frozen=True, slots=True)
class FleetParams:
    """The fleet around the replicas: gateway, operator, autoscaler, prices."""

    replicas: int = 26
    owners_per_adapter: int = 2  # ReplicaPool spec.ownersPerAdapter default
    # Gateway: pods splitting traffic (each keeps its own in-flight counts), state poll
    # interval, overload thresholds (gateway settings defaults).
    gateways: int = 2
    poll_s: float = 1.0
    max_tokens_in_flight: int = 16384
    max_queue_depth: int = 32
    # Router knobs (lorafleet_gateway.router.Thresholds): bounded-load factor over the fleet
    # mean (0 = absolute thresholds only, the router before the simulator's routing study) and
    # spill order ("rendezvous" or "least_loaded", the earlier rule).
    balance: float = 1.25
    spill: str = "rendezvous"
    # Which tiers the router's residency rules read (Thresholds.residency): "gpu" as shipped,
    # "any" also prefers a replica with the adapter in RAM or on disk (the experiment in
    # docs/design/0006).
    residency: str = "gpu"
    # Join-aware bounded load (Thresholds.settle_s / settle_rules): a replica the gateway has
    # routed to for less than settle_s is left out of the cap's fleet mean ("cap") and is the
    # last spill target ("spill"); 0 = off.
    settle_s: float = 0.0
    settle_rules: str = "cap+spill"
    # Operator: how often owner counts are re-planned from measured tokens/s (generated
    # tokens, as the agent reports them), and the per-replica capacity plan_owner_count divides
    # by (hot_share 0.5 of it per owner): the operator's own default
    # (lorafleet_core.planning.adapters.REPLICA_TOKENS_PER_SECOND, 640). 0 = what this replica
    # model can generate, max_seqs / decode_s (for runs that change either).
    operator_interval_s: float = 30.0
    replica_capacity_tps: float = REPLICA_TOKENS_PER_SECOND
    # Pre-warm owners' disk and RAM tiers at start (the operator's annotations, applied).
    prewarm: bool = True
    # A replica that joins (scale-up, restart) stays out of the gateway's candidates until its
    # first pre-warm pass ends, at most this long (the agent's prewarm_ready_timeout_s;
    # 0 = it serves at once, the behaviour before the agent reported `warming`).
    prewarm_gate_s: float = 180.0
    # The operator's owned-adapters annotation bound (ReplicaPool
    # spec.cache.ownedAnnotationMaxBytes): a pod owning more keeps its hottest adapters, then
    # those it owns first, ~470 simulated rows; the rest load on first request.
    owned_annotation_max_bytes: int = DEFAULT_OWNED_ANNOTATION_MAX_BYTES
    # Experiment (not in the operator): pre-warm a replica's newly owned adapters hottest first
    # by the last operator interval's tokens/s (lorafleet_core.planning.prewarm.prewarm_order);
    # false = id order, as the operator's annotation lists them.
    prewarm_by_traffic: bool = False
    # The agent's later passes (lorafleet_core.planning.prewarm.prewarm_pass `listed_before`):
    # register only what the new annotation newly lists, pull the rest to disk. False = the
    # whole owned list registered again on every change, over what traffic put in RAM
    # (measured in the ramp: evictions 10 -> 40/min per replica, GPU hits 88.9 -> 83.9%).
    prewarm_changes_only: bool = True
    # Experiment (not in the operator): the N hottest adapters by tokens/s of the last operator
    # interval are also pre-warmed on their next rendezvous replica, where spills land.
    prewarm_next_hot: int = 0
    # A merged pool beside the shared one: `merged_replicas` replicas serving only
    # `merged_adapter`, merged into the base weights (decode_s_merged per step, no adapter
    # loads, no LoRA slots); the gateway routes with lorafleet_gateway.pool_router.
    merged_replicas: int = 0
    merged_adapter: str = "hot-tenant"
    # When a merged replica is full (Thresholds.merged_max_queue_depth / _tokens_in_flight,
    # the gateway's settings of the same names; 0 = off) the request spills to the shared pool.
    merged_max_queue_depth: int = MERGED_MAX_QUEUE_DEPTH
    merged_max_tokens_in_flight: int = MERGED_MAX_TOKENS_IN_FLIGHT
    # Autoscaler (ReplicaPool spec.autoscaling defaults); off unless a scenario enables it.
    autoscale: bool = False
    min_replicas: int = 1
    max_replicas: int = 64
    target_tokens_in_flight: int = DEFAULT_TARGET_TOKENS_IN_FLIGHT
    target_queue_depth: int = 8
    autoscale_interval_s: float = 5.0
    scale_up_window_s: float = 30.0
    scale_down_window_s: float = 300.0
    # Reporting: per-GPU price, SLO, the evictions/min alert (charts' monitoring.yaml).
    gpu_hour_usd: float = 2.5
    slo_ttft_s: float = 1.0
    min_requests_per_adapter: int = 20
    evictions_alert_per_min: float = 30.0


def with_overrides(obj: Any, settings: list[str]) -> Any:
    """`obj` with `name=value` settings applied (unknown names are an error)."""
    names = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for item in settings:
        name, _, value = item.partition("=")
        if name not in names:
            continue  # belongs to the other parameter class (unknown_settings checks both)
        current = getattr(obj, name)
        if isinstance(current, str):
            changes[name] = value
        elif isinstance(current, bool):
            changes[name] = value.lower() in ("1", "true", "yes", "on")
        else:
            changes[name] = (
                type(current)(float(value)) if isinstance(current, int) else float(value)
            )
    return replace(obj, **changes)


def unknown_settings(settings: list[str]) -> list[str]:
    known = {f.name for f in fields(ReplicaParams)} | {f.name for f in fields(FleetParams)}
    return [s for s in settings if s.partition("=")[0] not in known]


def describe(replica: ReplicaParams, fleet: FleetParams) -> dict[str, Any]:
    return {"replica": asdict(replica), "fleet": asdict(fleet)}
