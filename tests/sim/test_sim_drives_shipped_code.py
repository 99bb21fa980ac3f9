"""The simulator runs the services' own decision code: a copy would make its figures fiction."""

from __future__ import annotations

import inspect
import pkgutil
from pathlib import Path

import lorafleet_core.planning.adapters as planning_adapters
import lorafleet_core.planning.autoscale as autoscale
import lorafleet_core.planning.cache_policy as cache_policy
import lorafleet_core.planning.placement as placement
import lorafleet_core.planning.prewarm as planning_prewarm
import lorafleet_gateway.router as router
import lorafleet_sim as sim_pkg
from lorafleet_agent import manager as agent_manager
from lorafleet_agent import prewarm as agent_prewarm
from lorafleet_sim import control_plane, engine, gateway, replica
from lorafleet_sim import prewarm as sim_prewarm
from lorafleet_sim.engine import Engine
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.workload import Mix, build


def used(module: object, name: str) -> object:
    """The object `module` refers to by `name` (what its code calls)."""
    return vars(module)[name]


def test_engine_calls_the_gateway_router_and_the_operator_planners():
    assert used(engine, "plan_route") is router.plan_route
    assert used(engine, "Thresholds") is router.Thresholds
    assert used(control_plane, "rendezvous_owners") is placement.owners
    assert used(control_plane, "plan_owner_count") is planning_adapters.plan_owner_count
    assert used(control_plane, "recommend") is autoscale.recommend
    assert used(control_plane, "stabilize") is autoscale.stabilize
    assert used(control_plane, "prewarm_order") is planning_prewarm.prewarm_order
    # The pre-warm pass: the operator's annotations and the agent's split of its pass.
    assert used(control_plane, "prewarm_pass") is planning_prewarm.prewarm_pass
    assert used(agent_prewarm, "prewarm_pass") is planning_prewarm.prewarm_pass
    assert used(sim_prewarm, "plan_owned_annotations") is planning_prewarm.plan_owned_annotations
    assert used(gateway, "blended_tokens") is router.blended_tokens
    assert used(gateway, "ReplicaView") is router.ReplicaView


def test_the_routing_ab_compares_the_gateways_own_policies():
    # random and least-loaded owner are the gateway's routing_policy values, not sim variants
    assert engine.ROUTERS is router.POLICIES
    w = build(mix=Mix.zipf(50, 1.0), rate=5, duration_s=30, seed=3)
    for policy in router.POLICIES:
        eng = Engine(w, ReplicaParams(), FleetParams(replicas=4), router=policy)
        assert eng.thresholds.policy == policy
    random_run = Engine(w, ReplicaParams(), FleetParams(replicas=4), router="random").run()
    assert {engine.OUTCOMES[o] for o in random_run.outcome} == {"random"}
    for module in (engine, control_plane, gateway):  # no routing draw of the simulator's own
        assert "randrange" not in Path(inspect.getfile(module)).read_text()


def test_simulated_fleet_defaults_are_the_operators_and_the_pools():
    from lorafleet_core.api.models import AutoscalingSpec
    from lorafleet_core.planning.fleet import FleetParams as OperatorFleetParams
    from lorafleet_operator.settings import OperatorSettings

    sim = FleetParams()
    capacity = OperatorSettings().replica_tokens_per_second
    assert sim.replica_capacity_tps == OperatorFleetParams().replica_capacity_tps == capacity
    assert capacity == ReplicaParams().max_seqs / ReplicaParams().decode_s == 640
    assert sim.target_tokens_in_flight == AutoscalingSpec().target_tokens_in_flight


def test_replicas_hold_the_agents_cache_policy_object():
    assert used(replica, "CachePolicy") is cache_policy.CachePolicy
    assert used(agent_manager, "CachePolicy") is cache_policy.CachePolicy
    eng = Engine(
        build(mix=Mix.zipf(20, 1.0), rate=5, duration_s=20, seed=1),
        ReplicaParams(),
        FleetParams(replicas=2),
    ).run()
    assert all(type(r.cache) is cache_policy.CachePolicy for r in eng.replicas)
    assert all(type(r.cache.slots) is cache_policy.SlotTracker for r in eng.replicas)


def test_no_second_copy_of_routing_placement_or_cache_logic_in_the_simulator():
    # Shipped names may be imported, never defined again; no private LRU either.
    shipped = {"plan_route", "owners", "ranked", "plan_owner_count", "recommend", "stabilize"}
    shipped |= {"prewarm_order", "prewarm_pass", "plan_owned_annotations", "PrewarmPass"}
    shipped |= {"SlotTracker", "LruBytes", "CachePolicy", "Thresholds", "ReplicaView"}
    for info in pkgutil.iter_modules(sim_pkg.__path__):
        module = __import__(f"lorafleet_sim.{info.name}", fromlist=["_"])
        source = Path(inspect.getfile(module)).read_text()
        defined = {
            name
            for name, obj in vars(module).items()
            if (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__
        }
        assert not defined & shipped, (info.name, defined & shipped)
        assert "OrderedDict" not in source, info.name
        assert "blake2b" not in source, info.name
