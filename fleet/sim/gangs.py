"""The trace's gangs as the hub's planner sees them: a waiting PyTorchJob (its demand, quota
and priority) and, once it runs, a possible victim of priority preemption (its replicas on
their named nodes, the quota it holds). Built once per gang and kept.

With elastic gangs, a gang of two or more replicas is an elastic PyTorchJob whose workers may
run from half its replicas (rounded up) to all of them: the planner admits it at what fits,
grows it while it runs below its max, and shrinks it instead of evicting it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from fleet.sim.members import GPU, MODEL_LABEL, RACK, cluster_name, node_name
from fleet.sim.trace import Gang
from planner.view import Elastic, JobView, PolicyView, Stage, WorkView
from preemption.model import Elasticity, Pod
from preemption.model import Running as Victim
from propagation.division import ClusterShare
from propagation.fit import Domain
from propagation.jobkey import JobKey
from propagation.resources import Resources
from propagation.views import JobDemand, NodeLabelIn, Role, TopologyRequest
from quota.engine import Holding, Job
from quota.priority import OPPORTUNISTIC_PRIORITY, is_opportunistic

KIND, GROUP = "PyTorchJob", "kubeflow.org"  # a gang is named as the hub keys a PyTorchJob
ROLE = "Worker"  # a gang's one role


def model_requirement(models: tuple[str, ...]) -> tuple[NodeLabelIn, ...]:
    """A pod's accepted GPU models as the required node label the division honours."""
    return (NodeLabelIn(MODEL_LABEL, models),) if models else ()


class GangViews:
    def __init__(self, policy: PolicyView, time_text: Callable[[float], str],
                 opportunistic: Sequence[str], leaves: Mapping[str, str], *,
                 runtimes: bool = False, elastic: bool = False, topology: str = "") -> None:
        self.policy, self.time_text = policy, time_text
        self.runtimes = runtimes  # the planner knows each gang's runtime (backfill)
        self.elastic = elastic  # gangs of two or more replicas are elastic
        # Gangs of two or more replicas keep to one rack: "required", "preferred" or not.
        self.topology = TopologyRequest(RACK, topology == "required") \
            if topology in ("required", "preferred") else None
        self.opportunistic = frozenset(opportunistic)  # tenants whose gangs run at -1
        self.leaves = leaves  # namespace -> its quota leaf's key
        self.preempted_by: dict[str, str] = {}  # gang -> preemptor key, until bound again
        self.requeued_at: dict[str, float] = {}  # gang -> when it last left its nodes, until
        # bound again (the hub's fleet.sh/requeued-at)
        self.names: dict[str, str] = {}  # job key -> gang name
        self._jobs: dict[str, JobView] = {}
        self._victims: dict[str, tuple[int, Victim]] = {}  # gang -> (replicas placed, view)
        self._holdings: dict[str, tuple[int, Holding]] = {}  # gang -> (size, holding)
        self._bound: dict[str, tuple[int, str, JobView]] = {}  # gang -> size, admitted, view

    def priority(self, gang: Gang) -> int:
        """The gang's priority: an opportunistic tenant's gangs all run at HiveD's -1."""
        return OPPORTUNISTIC_PRIORITY if gang.tenant in self.opportunistic else gang.priority

    def elastic_range(self, gang: Gang) -> Elastic | None:
        """An elastic gang's worker range: half its replicas (rounded up) to all."""
        if not self.elastic or gang.replicas < 2:
            return None
        return Elastic(ROLE, (gang.replicas + 1) // 2, gang.replicas)

    @staticmethod
    def key(gang: Gang) -> JobKey:
        """The gang's job key, as the hub would name a PyTorchJob in the tenant's namespace."""
        return JobKey.of(GROUP, KIND, gang.tenant, gang.name)

    def job(self, gang: Gang) -> JobView:
        """The gang as a waiting job, marked with who preempted it (until it is bound)."""
        view = self._jobs.get(gang.name)
        if view is None:
            key, created = self.key(gang), self.time_text(gang.arrival)
            priority = self.priority(gang)
            demand = JobDemand(key, (Role(ROLE, gang.replicas, Resources.of(
                {"cpu": gang.cpu, "memory": gang.memory, GPU: gang.gpus}),
                node_requirements=model_requirement(gang.models)),),
                self.topology if gang.replicas >= 2 else None)
            view = JobView(key, gang.name, created, Stage.WAITING, demand, policy=self.policy,
                           quota=Job(key, gang.tenant, dict(demand.total), priority, created),
                           priority=priority,
                           runtime=gang.duration if self.runtimes else None,
                           elastic=self.elastic_range(gang))
            self._jobs[gang.name] = view
            self.names[key] = gang.name
        by, again = self.preempted_by.get(gang.name), self.requeued_at.get(gang.name)
        if again is not None and view.quota is not None:
            view = replace(view, quota=replace(view.quota,
                                               waiting_since=self.time_text(again)))
        return replace(view, preempted_by=by) if by else view

    def quota(self, gang: Gang) -> Job:
        job = self.job(gang).quota
        assert job is not None  # every simulated gang is queued
        return job

    def holding(self, gang: Gang, admitted: str, size: int) -> Holding:
        """The quota a running gang holds at ``size`` replicas (kept while it runs: each
        pass reads them all)."""
        known = self._holdings.get(gang.name)
        if known is None or known[0] != size or known[1].admitted != admitted:
            job = self.quota(gang)
            if size != gang.replicas:
                job = replace(job, request={k: v * size // gang.replicas
                                            for k, v in job.request.items()})
            known = self._holdings[gang.name] = (size, Holding(job, admitted))
        return known[1]

    @staticmethod
    def share(cluster: int, placed: Sequence[int], domains: tuple[Domain, ...]) -> ClusterShare:
        """A running gang's placement, as the hub records it."""
        return ClusterShare(cluster_name(cluster), ((ROLE, len(placed)),), ((ROLE, 0),),
                            tuple(sorted({node_name(cluster, n) for n in placed})),
                            domains=domains)

    def bound(self, gang: Gang, cluster: int, placed: Sequence[int], admitted: str,
              domains: tuple[Domain, ...] = ()) -> JobView:
        """A running elastic gang as the hub sees a bound job that may grow: its placement,
        its Work running, demand and quota at the size it runs."""
        size = len(placed)
        known = self._bound.get(gang.name)
        if known is not None and known[:2] == (size, admitted):
            return known[2]
        waiting = self.job(gang)
        assert waiting.demand is not None
        role = replace(waiting.demand.roles[0], replicas=size)
        share = self.share(cluster, placed, domains)
        view = replace(waiting, stage=Stage.BOUND,
                       demand=JobDemand(waiting.key, (role,), waiting.demand.topology),
                       quota=self.holding(gang, admitted, size).job, placement=(share,),
                       works=(WorkView(f"{share.cluster}/{gang.name}", share.cluster,
                                       "Running"),),
                       dispatch_finalizer=True, preempted_by="")
        self._bound[gang.name] = (size, admitted, view)
        return view

    def victim(self, gang: Gang, cluster: int, placed: Sequence[int], admitted: str,
               domains: tuple[Domain, ...] = ()) -> Victim:
        """A running gang: its placed replicas on their named nodes, and the quota it holds
        (none when opportunistic)."""
        known = self._victims.get(gang.name)
        if known is not None and known[0] == len(placed) and known[1].started == admitted:
            return known[1]
        job = self.job(gang)
        assert job.demand is not None
        request = job.demand.roles[0].request
        leaf = None if is_opportunistic(job.priority) else self.leaves.get(gang.tenant)
        size, elastic = len(placed), self.elastic_range(gang)
        shrinks = None
        if elastic is not None and size > elastic.min:
            shares = (self.share(cluster, placed, domains),)
            shrinks = Elasticity(ROLE, elastic.min, size, shares, dict(request.items_))
        victim = Victim(job.key, gang.tenant, job.priority, admitted, tuple(
            Pod(cluster_name(cluster), node_name(cluster, n), request, ROLE.lower(), i)
            for i, n in enumerate(placed)),
            self.holding(gang, admitted, size).job.charge if leaf else {}, leaf, shrinks)
        self._victims[gang.name] = (len(placed), victim)
        return victim
