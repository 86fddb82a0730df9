"""The priority table: per tenant, node-aware Priority queues with borrowing, (a) today's
planner without priority preemption, (b) with the hub's priority preemption, (c) the tenant
alone on a private cluster of its guarantee under the same planner as (b). HiveD's bar: no
guaranteed tenant's p99 delay in the shared fleet worse than in its private cluster."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from fleet.sim.engine import Outcome, Scenario, fleet_capacity, quota_tree, summary
from fleet.sim.members import GPU
from fleet.sim.runs import Run
from fleet.sim.trace import Gang, Trace

# Tenant setups: all four guaranteed (a quarter of the GPUs each), or three guaranteed (a
# third each) and one opportunistic (HiveD's priority -1: no quota, idle GPUs only).
SETUPS = (("4 guaranteed", ()), ("3 guaranteed + 1 opportunistic", ("tenant-3",)))
HEAD = ["setup", "tenant", "guarantee", "gangs", "(a) p50", "(a) p99", "(a) GPU alloc",
        "(a) preempted", "(b) p50", "(b) p99", "(b) GPU alloc", "(b) preempted", "(c) p50",
        "(c) p99", "(c) p99 w/o preemption", "bar: (b) p99 <= (c) p99"]
RULES = ("Priorities and opportunistic tenants, per tenant (node-aware, Priority queues, "
         "borrowing): (a) today's planner, no priority preemption; (b) the hub's priority "
         "preemption; (c) the tenant alone on a private cluster of its guarantee, same planner "
         "as (b) (HiveD's bar: no tenant's p99 in the shared fleet worse than private). Delay = "
         "time queued (a preempted gang's waits added up); GPU alloc = its GPUs held / the "
         "fleet's, over the arrival window; preempted = times its gangs were victims (quota "
         "reclaim or priority).")


ELASTIC_HEAD = ["setup", "tenant", "gangs", "elastic gangs", "(b) p50", "(b) p99",
                "(b) GPU alloc", "(b) evicted", "(e) p50", "(e) p99", "(e) GPU alloc",
                "(e) evicted", "(e) shrunk", "(e) mean end after arrival",
                "(b) mean end after arrival", "(c) elastic p99", "bar: (e) p99 <= (c) p99"]
ELASTIC_RULES = ("Elastic gangs, per tenant: (b) the hub's priority preemption, as above; "
                 "(e) the same with every gang of two or more replicas an elastic PyTorchJob "
                 "(half to all of its replicas: admitted at what fits, grown as capacity "
                 "frees, shrunk rather than evicted; its work fixed, so it runs longer when "
                 "smaller). Evicted = times its gangs were requeued; shrunk = times they gave "
                 "back replicas instead; end after arrival = completion time, queueing "
                 "included (gangs that ended); (c) elastic = the tenant alone on a private "
                 "cluster of its guarantee, its gangs elastic alike (HiveD's bar for (e)).")


def shared(setup: tuple[str, tuple[str, ...]], preemption: bool) -> Scenario:
    name, opportunistic = setup
    return Scenario(f"{name}, {'preemption' if preemption else 'no preemption'}",
                    preemption=preemption, opportunistic=opportunistic)


def elastic(setup: tuple[str, tuple[str, ...]]) -> Scenario:
    return replace(shared(setup, True), name=f"{setup[0]}, preemption, elastic", elastic=True)


def elastic_runs(trace: Trace) -> list[Run]:
    out = [Run(elastic(setup)) for setup in SETUPS]
    for setup in SETUPS:
        out += [private(tenant, share, True, elastic=True)
                for tenant, share in guarantees(trace, setup).items() if share]
    return out


def elastic_table(trace: Trace, results: Mapping[Run, Outcome], fmt: Callable[[float], str]
                  ) -> tuple[list[list[str]], list[dict[str, object]]]:
    rows: list[list[str]] = [ELASTIC_HEAD]
    entries: list[dict[str, object]] = []
    gangs = {g.name: g for g in trace.gangs}
    for setup in SETUPS:
        rigid, grown = results[Run(shared(setup, True))], results[Run(elastic(setup))]
        shares = guarantees(trace, setup)
        for tenant in [*sorted(rigid.delays), ""]:  # "": every tenant
            own = [g for g in trace.gangs if g.tenant == tenant or not tenant]
            columns, raw = [], []
            for outcome in (rigid, grown):
                delays = outcome.delays[tenant] if tenant else outcome.all_delays()
                p50, _, p99 = summary(delays)
                allocation = outcome.tenant_allocation(tenant) if tenant else \
                    outcome.allocation
                evicted = outcome.tenant_preempted[tenant] if tenant else outcome.preempted
                columns += [fmt(p50), fmt(p99), f"{allocation:.3f}", str(evicted)]
                raw.append({"p50": p50, "p99": p99, "allocation": allocation,
                            "evicted": evicted})
            shrunk = grown.tenant_shrunk[tenant] if tenant else sum(
                grown.tenant_shrunk.values())
            ends = [_mean_end(o, gangs, tenant) for o in (grown, rigid)]
            share = shares.get(tenant, 0)
            alone = summary(results[private(tenant, share, True, elastic=True)]
                            .delays[tenant])[2] if share else float("nan")
            bar = "-" if not share else "met" if raw[1]["p99"] <= alone else \
                f"missed by {fmt(raw[1]['p99'] - alone)}"
            rows.append([setup[0], tenant or "all", str(len(own)),
                         str(sum(1 for g in own if g.replicas >= 2)), *columns, str(shrunk),
                         *(fmt(e) for e in ends), fmt(alone) if share else "-", bar])
            entries.append({"setup": setup[0], "tenant": tenant or "all",
                            "rigid": raw[0], "elastic": {**raw[1], "shrunk": shrunk},
                            "mean_end_after_arrival": dict(zip(("elastic", "rigid"), ends,
                                                               strict=True)),
                            **({"private_elastic_p99": alone, "bar_met": bar == "met"}
                               if share else {})})
        rows[-1][12] += f" (grown {grown.grown})"
    return rows, entries


def _mean_end(outcome: Outcome, gangs: Mapping[str, Gang], tenant: str) -> float:
    ends = [end - gangs[name].arrival for name, end in outcome.ended.items()
            if gangs[name].tenant == tenant or not tenant]
    return sum(ends) / len(ends) if ends else float("nan")


def guarantees(trace: Trace, setup: tuple[str, tuple[str, ...]]) -> dict[str, int]:
    tenants = tuple(sorted({g.tenant for g in trace.gangs}))
    tree = quota_tree(tenants, fleet_capacity(trace.nodes), shared(setup, False))
    return {leaf.name: leaf.min[GPU] for leaf in tree.children}


def private(tenant: str, share: int, preemption: bool, elastic: bool = False) -> Run:
    name = "preemption" if preemption else "no preemption"
    return Run(Scenario(f"{name}, elastic" if elastic else name, preemption=preemption,
                        elastic=elastic), tenant, share)


def runs(trace: Trace) -> list[Run]:
    out = []
    for setup in SETUPS:
        out += [Run(shared(setup, False)), Run(shared(setup, True))]
        for tenant, share in guarantees(trace, setup).items():
            if share:
                out += [private(tenant, share, True), private(tenant, share, False)]
    return out


def table(trace: Trace, results: Mapping[Run, Outcome],
          fmt: Callable[[float], str]) -> tuple[list[list[str]], list[dict[str, object]]]:
    rows, entries = [HEAD], []
    for setup in SETUPS:
        today, preempting = (results[Run(shared(setup, p))] for p in (False, True))
        for tenant, share in guarantees(trace, setup).items():
            row, entry = _tenant(tenant, share, today, preempting, results, fmt)
            rows.append([setup[0], *row])
            entries.append({"setup": setup[0], **entry})
        rows.append([setup[0], "all", "", str(len(preempting.all_delays())),
                     *_columns(today, today.all_delays(), today.allocation, today.preempted,
                               fmt),
                     *_columns(preempting, preempting.all_delays(), preempting.allocation,
                               preempting.preempted, fmt), "", "", "", ""])
    return rows, entries


def _columns(outcome: Outcome, delays: list[float], allocation: float, preempted: int,
             fmt: Callable[[float], str]) -> list[str]:
    p50, _, p99 = summary(delays)
    return [fmt(p50), fmt(p99), f"{allocation:.3f}", str(preempted)]


def _tenant(tenant: str, share: int, today: Outcome, preempting: Outcome,
            results: Mapping[Run, Outcome], fmt: Callable[[float], str]
            ) -> tuple[list[str], dict[str, object]]:
    alone = results[private(tenant, share, True)].delays[tenant] if share else []
    alone_today = results[private(tenant, share, False)].delays[tenant] if share else []
    b99, c99 = summary(preempting.delays[tenant])[2], summary(alone)[2]
    bar = "-" if not share else "met" if b99 <= c99 else f"missed by {fmt(b99 - c99)}"
    row = [tenant, f"{share} GPUs" if share else "opportunistic",
           str(len(preempting.delays[tenant])),
           *_columns(today, today.delays[tenant], today.tenant_allocation(tenant),
                     today.tenant_preempted[tenant], fmt),
           *_columns(preempting, preempting.delays[tenant],
                     preempting.tenant_allocation(tenant),
                     preempting.tenant_preempted[tenant], fmt),
           fmt(summary(alone)[0]), fmt(c99), fmt(summary(alone_today)[2]), bar]
    entry: dict[str, object] = {"tenant": tenant, "guarantee": share, "bar_met": b99 <= c99}
    for column, outcome in (("a", today), ("b", preempting)):
        p50, _, p99 = summary(outcome.delays[tenant])
        entry[column] = {"p50": p50, "p99": p99,
                         "allocation": outcome.tenant_allocation(tenant),
                         "preempted": outcome.tenant_preempted[tenant]}
    entry["c"] = dict(zip(("p50", "p90", "p99"), summary(alone), strict=True))
    entry["c_without_preemption"] = dict(zip(("p50", "p90", "p99"), summary(alone_today),
                                             strict=True))
    return row, entry
