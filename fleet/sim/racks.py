"""The rack table: the shared fleet (four guaranteed tenants, priority preemption) on members
whose nodes are in racks, gangs of two or more replicas placed anywhere, preferring one rack,
or required to keep to one: how many run within one rack, and what it costs in delay."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fleet.sim.engine import RACK_SIZE, Outcome, Scenario, summary
from fleet.sim.members import RACKS_PER_BLOCK
from fleet.sim.runs import Run
from fleet.sim.trace import Trace

TOPOLOGIES = ("any", "preferred", "required")
HEAD = ["gangs of 2+ replicas", "started", "in one rack", "their delay p50", "their p99",
        "all gangs' p50", "all gangs' p99", "GPU alloc", "preempted"]
RULES = (f"Racks: each member's nodes in racks of {RACK_SIZE} (blocks of {RACKS_PER_BLOCK} "
         "racks), four guaranteed tenants, priority preemption; gangs of two or more "
         "replicas placed anywhere, preferring one rack, or required to keep to one "
         "(fleet.sh/podset-preferred-topology / -required-topology: the rack level). In one "
         "rack = started gangs of 2+ replicas whose every replica ran in one rack.")


def scenario(topology: str) -> Scenario:
    return Scenario(f"racks, {topology}", preemption=True, topology=topology)


def runs() -> list[Run]:
    return [Run(scenario(t)) for t in TOPOLOGIES]


def table(trace: Trace, results: Mapping[Run, Outcome], fmt: Callable[[float], str]
          ) -> tuple[list[list[str]], list[dict[str, object]]]:
    multi = {g.name for g in trace.gangs if g.replicas >= 2}
    rows, entries = [HEAD], []
    for topology in TOPOLOGIES:
        outcome = results[Run(scenario(topology))]
        theirs = [d for name, d in outcome.by_gang.items() if name in multi]
        m50, _, m99 = summary(theirs)
        a50, _, a99 = summary(outcome.all_delays())
        share = outcome.multi_in_one_rack / outcome.multi_started \
            if outcome.multi_started else float("nan")
        rows.append([topology, str(outcome.multi_started), f"{share:.0%}", fmt(m50),
                     fmt(m99), fmt(a50), fmt(a99), f"{outcome.allocation:.3f}",
                     str(outcome.preempted)])
        entries.append({"topology": topology, "started": outcome.multi_started,
                        "in_one_rack": share, "delay": {"p50": m50, "p99": m99},
                        "all_delay": {"p50": a50, "p99": a99},
                        "allocation": outcome.allocation, "preempted": outcome.preempted})
    return rows, entries
