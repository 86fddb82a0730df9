"""Reservation mode's two phases, as pure decisions: the hub's (commit only when every member
reserved; roll back all on one refusal, a lost member or the deadline) and the agent's
(placeholders per replica, Reserved/Refused, the swap on Commit, orphans)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from e2e.jobs import seed_pytorchjob
from fleet.api import protocol as p
from fleet.hub import reservations as hub_condition
from member_agent.controllers import placeholders as ph
from member_agent.fencing import Action, fence_of, judge, member_job
from member_agent.tenancy import other_tenants
from planner import PassView, plan_pass
from planner import reserving as planner_reserving
from planner.intents import Commit, FailOver, RollBack, Wait
from planner.view import FailoverSettings, JobView, PolicyView, Stage, WorkView
from propagation.division import ClusterShare
from propagation.resources import Resources
from propagation.views import ClusterView, JobDemand, NodeGroup, PlacementRules, Role

NOW = 1_000_000.0
GPU = "nvidia.com/gpu"
SPLIT = PolicyView("p", PlacementRules(max_clusters=2))
Body = dict[str, Any]


def member(name: str, *, reservation: bool = True, ready: bool = True, gpus: int = 8
           ) -> ClusterView:
    return ClusterView(name, ready, node_groups=(NodeGroup(2, Resources.of({GPU: gpus})),),
                       not_ready_reason="" if ready else "agent heartbeat 99s old",
                       reservation=reservation)


def view(*jobs: JobView, clusters: tuple[ClusterView, ...] = (), now: float = NOW) -> PassView:
    members = clusters or (member("a"), member("b"))
    by_name = {c.name: c for c in members}
    return PassView(now, "now", jobs, by_name, by_name, reserve_seconds=60.0,
                    reserve_backoff_seconds=10.0)


def work(cluster: str, reservation: str = "", *, phase: str = "Reserve", message: str = "",
         created: float = NOW - 5) -> WorkView:
    return WorkView(f"fleet-member-{cluster}/w", cluster, phase=phase, reservation=reservation,
                    reservation_message=message, created=created)


def split_job(*works: WorkView, **changes: object) -> JobView:
    placement = tuple(ClusterShare(c, (("Worker", 2),), (("Worker", 2 * i),))
                      for i, c in enumerate(("a", "b")))
    failover = replace(SPLIT, failover=FailoverSettings(0.0, "Immediately", 0.0))
    return replace(JobView("PyTorchJob/ns/gang", "uid-gang", "t", Stage.BOUND, policy=failover,
                           placement=placement, works=works, dispatch_finalizer=True),
                   **changes)


def intents(job: JobView, **kw: Any) -> list[object]:
    return [i for i in plan_pass(view(job, **kw)) if isinstance(i, (Commit, RollBack))]


# -- the hub: commit only on all, roll back all on one refusal or the deadline ---------------

def test_commit_only_when_every_member_reserved() -> None:
    assert intents(split_job(work("a", "Reserved"), work("b", "Reserving"))) == []
    assert intents(split_job(work("a", "Reserved"), work("b", ""))) == []
    [commit] = intents(split_job(work("a", "Reserved"), work("b", "Reserved")))
    assert isinstance(commit, Commit)
    assert commit.works == ("fleet-member-a/w", "fleet-member-b/w")
    assert "a, b" in commit.reason


def test_no_commit_while_a_share_has_no_work_yet() -> None:
    """A hub that died between its Works: the missing one is dispatched first (in phase
    Reserve), never committed around."""
    job = split_job(work("a", "Reserved"))
    assert intents(job) == []


def test_one_refusal_rolls_back_the_whole_gang() -> None:
    job = split_job(work("a", "Reserved"), work("b", "Refused", message="placeholder "
                                                  "gang-worker-3-hold cannot be placed"))
    plan = plan_pass(view(job))
    [rollback] = [i for i in plan if isinstance(i, RollBack)]
    assert rollback.member == "b"
    assert "b refused the reservation: placeholder gang-worker-3-hold" in rollback.reason
    assert rollback.retry_at == NOW + 10.0
    # the rollback replaces failover for this pass (one requeue, one reason)
    assert not [i for i in plan if isinstance(i, (FailOver, Commit))]


def test_the_deadline_rolls_back_naming_the_member_that_did_not_confirm() -> None:
    job = split_job(work("a", "Reserved", created=NOW - 61),
                    work("b", "Reserving", message="1 of 2 placeholders bound",
                         created=NOW - 60))
    [rollback] = intents(job)
    assert isinstance(rollback, RollBack)
    assert rollback.member == "b"
    assert "within 60 s (1 of 2 placeholders bound)" in rollback.reason
    # just before the deadline: still waiting
    assert intents(job, now=NOW - 1.5) == []


def test_a_member_lost_while_reserving_rolls_back() -> None:
    job = split_job(work("a", "Reserved"), work("b", "Reserving"))
    [rollback] = intents(job, clusters=(member("a"), member("b", ready=False)))
    assert isinstance(rollback, RollBack)
    assert rollback.member == "b"
    assert "lost while reserving" in rollback.reason


def test_committed_or_unreserved_placements_are_left_alone() -> None:
    assert intents(split_job(work("a", "Reserved", phase="Commit"),
                             work("b", "Reserved", phase="Commit"))) == []
    assert intents(split_job(work("a", phase=""), work("b", phase=""))) == []


def test_a_split_gang_on_reservation_members_binds_in_phase_reserve() -> None:
    demand = JobDemand("PyTorchJob/ns/big", (Role("Worker", 4, Resources.of({GPU: 8})),))
    job = JobView("PyTorchJob/ns/big", "uid-big", "t", Stage.WAITING, demand, policy=SPLIT)
    [bind] = plan_pass(view(job)).binds
    assert bind.clusters == ("a", "b")
    assert bind.reserve
    plain = plan_pass(view(job, clusters=(member("a", reservation=False),
                                          member("b", reservation=False)))).binds
    assert [b.reserve for b in plain] == [False]


def test_a_rolled_back_job_waits_for_its_backoff_then_binds_again() -> None:
    demand = JobDemand("PyTorchJob/ns/big", (Role("Worker", 4, Resources.of({GPU: 8})),))
    job = JobView("PyTorchJob/ns/big", "uid-big", "t", Stage.WAITING, demand, policy=SPLIT,
                  reserve_retry_at=NOW + 5)
    plan = plan_pass(view(job))
    assert plan.binds == []
    [why] = [i for i in plan if isinstance(i, Wait)]
    assert why.reason == "ReservationRolledBack"
    assert [b.job for b in plan_pass(view(job, now=NOW + 5)).binds] == [job.key]


def test_the_planner_speaks_the_protocol() -> None:
    assert planner_reserving.PHASE_RESERVE == p.PHASE_RESERVE
    assert (planner_reserving.RESERVED, planner_reserving.REFUSED) == (p.RESERVED, p.REFUSED)


# -- the agent: placeholders ------------------------------------------------------------

def a_work(phase: str = "Reserve", nodes: tuple[str, ...] = ("n1", "n2")) -> Body:
    # this member's share: workers 2 and 3, 1 GPU each (the master runs on the other member)
    job = seed_pytorchjob("gang", "ns", workers=2, master=False)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["priorityClassName"] = "prod"
    job["metadata"]["annotations"] = {p.WORK: "fleet-member-b/w"}
    return {"metadata": {"name": "w", "namespace": "fleet-member-b"},
            "spec": {"job": {"uid": "uid-gang"}, "manifests": [job],
                     "placement": {"cluster": "b", "nodes": list(nodes), "phase": phase,
                                   "replicas": {"Worker": 2}, "offsets": {"Worker": 2}}}}


OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "gang", "uid": "m-1"}


def bound_to(pod: Body, node: str | None, *, unschedulable: str = "") -> Body:
    pod = {**pod, "spec": {**pod["spec"]}, "status": {}}
    if node:
        pod["spec"]["nodeName"] = node
    if unschedulable:
        pod["status"] = {"conditions": [{"type": "PodScheduled", "status": "False",
                                         "reason": "Unschedulable",
                                         "message": unschedulable}]}
    return pod


def test_reserve_creates_one_placeholder_per_replica_with_its_requests_and_priority() -> None:
    decided = ph.plan(a_work(), [], [], OWNER)
    assert [c["metadata"]["name"] for c in decided.create] == ["gang-worker-2-hold",
                                                               "gang-worker-3-hold"]
    pod = decided.create[0]
    assert pod["spec"]["priorityClassName"] == "prod"
    container = pod["spec"]["containers"][0]
    assert container["resources"]["requests"][GPU] == "1"
    assert container["image"] == ph.DEFAULT_IMAGE
    assert pod["metadata"]["labels"][p.JOB_UID] == "uid-gang"
    assert pod["metadata"]["annotations"][p.WORK] == "fleet-member-b/w"
    assert pod["metadata"]["ownerReferences"] == [OWNER]  # not its controller
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                       "values": [n]}]} for n in ("n1", "n2")]
    assert decided.verdict == ph.Verdict(p.RESERVING, "0 of 2 placeholders bound")
    assert ph.plan(a_work(), [], [], None).create == ()  # the member copy first
    assert p.TENANT not in pod["metadata"]["labels"]


def test_a_placeholder_holds_its_nodes_for_its_tenant() -> None:
    """Other tenants' pods keep away from the nodes it holds, as from its job's pods; the
    Work's manifest is not touched."""
    work = a_work()
    work["spec"]["placement"]["tenant"] = "root.team-a"
    before = copy.deepcopy(work)
    pod = ph.plan(work, [], [], OWNER).create[0]
    assert pod["metadata"]["labels"][p.TENANT] == "root.team-a"
    assert pod["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"] == [other_tenants("root.team-a")]
    assert work == before


def test_reserved_only_when_every_placeholder_is_bound_refused_at_the_first_unschedulable(
        ) -> None:
    made = ph.plan(a_work(), [], [], OWNER).create
    one = [bound_to(made[0], "n1"), bound_to(made[1], None)]
    assert ph.plan(a_work(), one, [], OWNER).verdict.state == p.RESERVING  # type: ignore
    both = [bound_to(made[0], "n1"), bound_to(made[1], "n2")]
    verdict = ph.plan(a_work(), both, [], OWNER).verdict
    assert verdict is not None
    assert verdict.state == p.RESERVED
    taken = [bound_to(made[0], "n1"),
             bound_to(made[1], None, unschedulable="0/5 nodes are available")]
    verdict = ph.plan(a_work(), taken, [], OWNER).verdict
    assert verdict is not None
    assert verdict.state == p.REFUSED
    assert "gang-worker-3-hold cannot be placed: 0/5 nodes" in verdict.message


def test_commit_hands_each_slot_to_its_real_pod_and_nothing_is_created() -> None:
    made = ph.plan(a_work(), [], [], OWNER).create
    held = [bound_to(made[0], "n1"), bound_to(made[1], "n2")]
    assert ph.pinned_node(held, ("worker", 3)) == ("n2", "gang-worker-3-hold")
    decided = ph.plan(a_work("Commit"), held, [("worker", 2)], OWNER)
    assert decided.create == ()
    assert decided.delete == ("gang-worker-2-hold",)
    assert decided.verdict is not None
    assert decided.verdict.state == p.RESERVED


def test_placeholders_go_when_the_work_has_no_phase_or_is_deleted() -> None:
    made = ph.plan(a_work(), [], [], OWNER).create
    held = [bound_to(made[0], "n1")]
    assert ph.plan(a_work(""), held, [], OWNER).delete == ("gang-worker-2-hold",)
    going = a_work()
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert ph.plan(going, held, [], OWNER) == ph.HoldPlan(delete=("gang-worker-2-hold",))


def test_orphaned_placeholders_are_found_by_their_work() -> None:
    made = ph.plan(a_work(), [], [], OWNER).create
    assert ph.orphans(made, "fleet-member-b", {"w": "uid-gang"}) == []
    gone = ph.orphans(made, "fleet-member-b", {})
    assert [(name, why) for _, name, why in gone] == [
        ("gang-worker-2-hold", "its Work w is gone"), ("gang-worker-3-hold", "its Work w is gone")]
    assert ph.orphans(made, "fleet-member-b", {"w": "another"})[0][2].endswith("another job")
    assert ph.orphans(made, "fleet-member-other", {}) == []  # another agent's


def test_the_job_gets_no_pods_while_its_work_reserves() -> None:
    body = a_work()["spec"]["manifests"][0]
    body["metadata"]["labels"] = {p.JOB_UID: "uid-gang"}
    job = member_job(("k", "ns", "gang"), body, "fleet-member-b")
    assert job is not None
    assert judge(job, fence_of(a_work()), synced=True).action is Action.HOLD
    assert judge(job, fence_of(a_work("Commit")), synced=True).action is Action.RUN


# -- the hub job's condition ---------------------------------------------------------------

def test_the_hub_job_shows_reserving_then_committed() -> None:
    reserving = a_work()
    reserving["status"] = {"conditions": [{"type": p.RESERVED, "status": "False",
                                           "reason": p.REFUSED, "message": "full"}]}
    said = hub_condition.condition([reserving], "t1", None)
    assert said is not None
    assert said["reason"] == p.RESERVING
    assert said["message"] == "b: Refused (full)"
    status = hub_condition.with_condition({"conditions": [{"type": "Created"}]}, said)
    assert [c["type"] for c in status["conditions"]] == ["Reservation", "Created"]
    said = hub_condition.condition([a_work("Commit")], "t2", status)
    assert said is not None
    assert said["reason"] == "Committed"
    assert hub_condition.condition([a_work("")], "t3", None) is None


def test_a_rollback_stays_on_the_waiting_job() -> None:
    status = hub_condition.with_condition(
        {"conditions": [{"type": "Queuing"}]},
        hub_condition.rolled_back("member2 refused the reservation: full", "t1", None))
    said = hub_condition.kept(status)
    assert said is not None
    assert (said["reason"], said["message"]) == ("RolledBack",
                                                  "member2 refused the reservation: full")
    assert hub_condition.kept({"conditions": [{"type": "Queuing"}]}) is None
