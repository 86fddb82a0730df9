"""Elastic gangs and racks in the simulator: the hub's planner admits elastic gangs at what
fits, grows them as capacity frees and shrinks them instead of evicting them (their work is
fixed, so their end moves with their size); gangs asked to keep to one rack do, on members
whose nodes are in racks."""

from __future__ import annotations

from fleet.sim.engine import Scenario, Simulation, fleet_capacity, quota_tree
from fleet.sim.trace import Gang, Node, Trace

GI = 1 << 30


def gang(name: str, arrival: float, replicas: int, gpus: int, priority: int = 0,
         duration: float = 100.0) -> Gang:
    return Gang(name, "t0", arrival, duration, replicas, 1000, GI, gpus, priority)


def fleet(*gangs: Gang) -> Trace:
    nodes = tuple(Node(f"n{i}", 32_000, 64 * GI, 4, "A100") for i in range(2))
    return Trace(nodes, gangs, "test")


def test_an_elastic_gang_starts_at_what_fits_and_grows_when_capacity_frees() -> None:
    trace = fleet(gang("small", 0, 1, 4), gang("elastic", 1, 4, 2))
    rigid = Simulation(trace, Scenario("rigid"), clusters=1).run()
    assert rigid.by_gang["elastic"] == 99  # waits for the whole gang's 8 GPUs
    assert rigid.grown == 0
    sim = Simulation(trace, Scenario("elastic", elastic=True), clusters=1)
    outcome = sim.run()
    assert outcome.by_gang["elastic"] == 0  # admitted at 2 of 2..4 at once
    assert outcome.grown == 1  # to 4 when "small" ended at 100
    # 400 replica-seconds of work: 198 at 2 replicas until 100, the other 202 at 4
    assert outcome.ended["elastic"] == 150.5
    assert rigid.ended["elastic"] == 200


def test_an_elastic_victim_is_shrunk_not_evicted_and_runs_on() -> None:
    trace = fleet(gang("elastic", 0, 4, 2), gang("urgent", 10, 1, 4, priority=10))
    outcome = Simulation(trace, Scenario("elastic", elastic=True, preemption=True),
                         clusters=1).run()
    assert outcome.tenant_shrunk["t0"] == 1
    assert outcome.tenant_preempted["t0"] == 0  # nobody evicted
    assert outcome.by_gang == {"urgent": 0.0, "elastic": 0.0}
    assert outcome.grown == 1  # back to 4 once "urgent" ended
    rigid = Simulation(trace, Scenario("rigid", preemption=True), clusters=1).run()
    assert rigid.tenant_preempted["t0"] == 1  # evicted: it waits and starts over
    assert rigid.by_gang["elastic"] > 0


def test_a_gang_that_requires_a_rack_runs_in_one() -> None:
    """Two racks of 8 one-GPU nodes: a gang of 4 takes half of one rack, then a gang of 8
    arrives. Placed anywhere, it fills the half-used rack and spills into the other; asked
    to keep to one rack (required or preferred) it takes the free rack whole. Both start at
    once either way."""
    nodes = tuple(Node(f"n{i}", 32_000, 64 * GI, 1, "A100") for i in range(16))
    trace = Trace(nodes, (gang("first", 0, 4, 1), gang("eight", 1, 8, 1)), "test")
    for topology, in_one in (("any", 1), ("required", 2), ("preferred", 2)):
        outcome = Simulation(trace, Scenario(topology, topology=topology), clusters=1).run()
        assert outcome.multi_started == 2
        assert outcome.multi_in_one_rack == in_one, topology
        assert outcome.by_gang["eight"] == 0


def test_a_guarantee_is_a_slice_of_every_resource_the_gangs_ask_for() -> None:
    """Each guaranteed tenant's min is its share of the fleet's GPUs, CPU and memory (what a
    private cluster of its guarantee holds); an opportunistic tenant's is none. With GPUs
    alone, every tenant would borrow CPU from its first millicore, and its gangs would be
    reclaimed by any other tenant's claim within its guarantee."""
    capacity = fleet_capacity(fleet().nodes)
    assert capacity == {"nvidia.com/gpu": 8, "cpu": 64_000, "memory": 128 * GI}
    tree = quota_tree(("t0", "t1", "t2"), capacity, Scenario("x", opportunistic=("t2",)))
    mins = {leaf.name: dict(leaf.min) for leaf in tree.children}
    assert mins["t0"] == mins["t1"] == {"nvidia.com/gpu": 4, "cpu": 32_000, "memory": 64 * GI}
    assert mins["t2"] == {"nvidia.com/gpu": 0, "cpu": 0, "memory": 0}
