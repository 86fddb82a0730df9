"""The quota engine: tables from the seeds, and properties over random trees and job streams."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.amounts import MAX_JOBS
from quota.engine import AdmissionPass, Blocker, Holding, Job, QueuePolicy
from quota.queues import queue_names
from quota.tree import QuotaNode, walk
from quota.validation import validate_tree

GPU = "nvidia.com/gpu"


def seed_tree() -> QuotaNode:
    """Seed 002's tree: child-2 owns default and lets one job out at a time."""
    return QuotaNode("root", min={"cpu": 9_999_000, "memory": 40 * 2**30},
                     max={"cpu": 999_900_000, "memory": 400_000 * 2**30, MAX_JOBS: 10**10,
                          GPU: 100_000},
                     children=(QuotaNode("child-2", max={MAX_JOBS: 1, "cpu": 10_000_000,
                                                         GPU: 10_000,
                                                         "memory": 10_000 * 2**30},
                                         namespaces=("default",)),))


def job(name: str, ns: str = "default", gpus: int = 1, priority: int = 0,
        created: str = "2026-01-01T00:00:00Z") -> Job:
    return Job(f"PyTorchJob/{ns}/{name}", ns, {GPU: gpus, "cpu": 1000}, priority, created)


def test_max_jobs_lets_one_job_out_at_a_time() -> None:
    first = job("a", created="2026-01-01T00:00:01Z")
    second = job("b", created="2026-01-01T00:00:02Z")
    admission = AdmissionPass(seed_tree(), [], [first, second])
    assert admission.queues()["root/child-2"] == [first, second]
    assert admission.check(first).fits
    admission.admit(first, "2026-01-01T00:00:03Z")
    verdict = admission.check(second)
    assert not verdict.fits
    assert verdict.reason == "quota root/child-2: kube-queue/max-jobs used 1 + requested 1 > max 1"


def test_a_namespace_no_leaf_owns_waits_with_a_reason() -> None:
    verdict = AdmissionPass(seed_tree(), [], []).check(job("x", ns="elsewhere"))
    assert not verdict.fits
    assert verdict.reason == "no quota leaf owns namespace 'elsewhere'"


def test_order_is_priority_then_creation() -> None:
    early = job("early", created="2026-01-01T00:00:01Z")
    late_urgent = job("urgent", priority=10, created="2026-01-01T00:00:09Z")
    admission = AdmissionPass(seed_tree(), [], [early, late_urgent])
    assert admission.candidates() == [late_urgent, early]


def two_teams(policy: QueuePolicy = QueuePolicy.PRIORITY
              ) -> tuple[QuotaNode, dict[str, QueuePolicy]]:
    root = QuotaNode("root", min={GPU: 8}, max={GPU: 8}, children=(
        QuotaNode("a", min={GPU: 4}, max={GPU: 8}, namespaces=("team-a",)),
        QuotaNode("b", min={GPU: 4}, max={GPU: 8}, namespaces=("team-b",)),
    ))
    return root, {"root/a": policy, "root/b": policy}


def test_a_leaf_borrows_idle_quota_then_the_owner_reclaims_it() -> None:
    root, policies = two_teams()
    borrowed = [Holding(job(f"a{i}", "team-a", gpus=2, created=f"2026-01-01T00:00:0{i}Z"),
                        f"2026-01-01T00:01:0{i}Z") for i in range(4)]  # team-a uses all 8
    claim = job("b0", "team-b", gpus=4, created="2026-01-01T00:02:00Z")
    admission = AdmissionPass(root, borrowed, [claim], policies)
    verdict = admission.check(claim)
    assert verdict.fits
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/team-a/a3", "PyTorchJob/team-a/a2"]
    admission.release(verdict.victims)
    admission.admit(claim, "2026-01-01T00:02:01Z")
    assert admission.usage("root")[GPU] == 8


def test_a_job_admitted_in_this_pass_is_never_reclaimed_in_it() -> None:
    """Its bind and a requeue written in one pass would race: one fails, and the tree could
    stay above its max until jobs end."""
    root, policies = two_teams()
    held = [Holding(job(f"a{i}", "team-a", gpus=2, created=f"2026-01-01T00:00:0{i}Z"),
                    f"2026-01-01T00:01:0{i}Z") for i in range(2)]  # team-a holds 4
    borrower = job("a9", "team-a", gpus=4, created="2026-01-01T00:00:09Z")
    claim = job("b0", "team-b", gpus=4, created="2026-01-01T00:02:00Z")
    admission = AdmissionPass(root, held, [borrower, claim], policies)
    assert admission.check(borrower).fits
    admission.admit(borrower, "2026-01-01T00:02:01Z")  # team-a now borrows 4 of team-b's min
    verdict = admission.check(claim)
    assert verdict.fits
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/team-a/a1", "PyTorchJob/team-a/a0"]


def test_a_job_admitted_in_one_pass_may_be_reclaimed_in_the_next() -> None:
    """The simulator keeps one engine across passes: what a pass admitted is a holding like
    any other from the next pass on, the youngest and so the first victim."""
    root, policies = two_teams()
    held = [Holding(job(f"a{i}", "team-a", gpus=2, created=f"2026-01-01T00:00:0{i}Z"),
                    f"2026-01-01T00:01:0{i}Z") for i in range(2)]
    borrower = job("a9", "team-a", gpus=4, created="2026-01-01T00:00:09Z")
    claim = job("b0", "team-b", gpus=4, created="2026-01-01T00:02:00Z")
    admission = AdmissionPass(root, held, [borrower], policies)
    admission.admit(borrower, "2026-01-01T00:02:01Z")
    admission.next_pass([claim])
    verdict = admission.check(claim)
    assert verdict.fits
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/team-a/a9"]


def test_no_leaf_borrows_while_another_waits_within_its_guarantee() -> None:
    root, policies = two_teams()
    held = [Holding(job("a0", "team-a", gpus=6), "2026-01-01T00:01:00Z")]
    claim = job("b0", "team-b", gpus=4, created="2026-01-01T00:02:00Z")
    more = job("a1", "team-a", gpus=1, created="2026-01-01T00:03:00Z")
    admission = AdmissionPass(root, held, [claim, more], policies)
    assert "waits within its guarantee" in admission.check(more).reason


def test_no_reclaim_beyond_the_guarantee() -> None:
    root, policies = two_teams()
    borrowed = [Holding(job(f"a{i}", "team-a", gpus=2), f"2026-01-01T00:01:0{i}Z")
                for i in range(4)]
    greedy = job("b0", "team-b", gpus=6)  # b's min is 4
    verdict = AdmissionPass(root, borrowed, [greedy], policies).check(greedy)
    assert not verdict.fits
    assert not verdict.victims


def test_block_policy_keeps_strict_order_and_priority_policy_lets_small_jobs_pass() -> None:
    root, _ = two_teams()
    big, small = job("big", "team-a", gpus=9, created="1"), job("small", "team-a", created="2")
    for policy, small_goes in ((QueuePolicy.BLOCK, False), (QueuePolicy.PRIORITY, True)):
        admission = AdmissionPass(root, [], [big, small], {"root/a": policy})
        assert not admission.check(big).fits
        admission.wait(big)
        assert admission.check(small).fits is small_goes


def admitted_at_one_minute() -> list[Holding]:
    """Two jobs of team-a created after 00:00:00, admitted at 00:01:00 and 00:01:01."""
    return [Holding(job(f"s{i}", "team-a", created=f"2026-01-01T00:00:0{i + 1}Z"),
                    f"2026-01-01T00:01:0{i}Z") for i in range(2)]


def test_a_starving_job_blocks_its_queue_after_the_bound() -> None:
    root, _ = two_teams()
    big = job("big", "team-a", gpus=8, created="2026-01-01T00:00:00Z")
    passed = admitted_at_one_minute()
    small = job("small", "team-a", created="2026-01-01T00:00:09Z")
    admission = AdmissionPass(root, passed, [big, small], {"root/a": QueuePolicy.PRIORITY},
                              starvation_bound=2)
    assert admission.bypassed(big) == 2
    assert not admission.check(big).fits
    admission.wait(big)
    verdict = admission.check(small)
    assert not verdict.fits
    assert "waits for PyTorchJob/team-a/big first" in verdict.reason


def test_jobs_admitted_while_a_requeued_job_ran_did_not_pass_it_over() -> None:
    # big ran until 00:01:30, then was preempted: the two admitted at 00:01:00 and 00:01:01
    # took nothing from it, and its queue does not block behind it for them; one admitted
    # after it began to wait again does count.
    root, _ = two_teams()
    big = Job("PyTorchJob/team-a/big", "team-a", {GPU: 8, "cpu": 1000}, 0,
              "2026-01-01T00:00:00Z", waiting_since="2026-01-01T00:01:30Z")
    passed = admitted_at_one_minute()
    small = job("small", "team-a", created="2026-01-01T00:00:09Z")
    admission = AdmissionPass(root, passed, [big, small], {"root/a": QueuePolicy.PRIORITY},
                              starvation_bound=2)
    assert admission.bypassed(big) == 0
    admission.wait(big)
    assert admission.check(small).fits
    later = Holding(job("s9", "team-a", created="2026-01-01T00:00:08Z"),
                    "2026-01-01T00:02:00Z")
    admission = AdmissionPass(root, [*passed, later], [big, small],
                              {"root/a": QueuePolicy.PRIORITY}, starvation_bound=2)
    assert admission.bypassed(big) == 1


def test_queue_names_are_stable_paths() -> None:
    names = queue_names(p.path for p in walk(seed_tree()))
    assert names == {("root",): "root", ("root", "child-2"): "root-child-2"}
    clash = queue_names([("a-b", "c"), ("a", "b-c")])
    assert len(set(clash.values())) == 2


def test_seed_tree_is_valid_with_a_root_min_warning() -> None:
    verdict = validate_tree(seed_tree(), namespace="kube-system", name="elasticquotatree")
    assert verdict.errors == ()
    assert len(verdict.warnings) == 1


def test_a_leaf_guaranteeing_gpus_alone_is_warned_its_cpu_is_borrowed() -> None:
    gpu_only = QuotaNode("root", {GPU: 8, "cpu": 64}, {GPU: 8, "cpu": 64}, children=(
        QuotaNode("a", {GPU: 4}, {GPU: 8, MAX_JOBS: 10}, ("team-a",)),
        QuotaNode("b", {GPU: 4, "cpu": 32, "memory": 64}, {GPU: 8}, ("team-b",)),
        QuotaNode("c", {}, {GPU: 8}, ("team-c",))))
    verdict = validate_tree(gpu_only, namespace="kube-system", name="t")
    assert verdict.errors == ()
    assert verdict.warnings == (
        "spec.root.children[0].min: guarantees nvidia.com/gpu but not cpu, memory: a resource "
        "left out of min is guaranteed 0, so whatever of it this leaf's jobs use is borrowed "
        "and another leaf taking back its own guarantee may reclaim them; list it in min to "
        "guarantee it",)


@st.composite
def trees(draw: st.DrawFn) -> QuotaNode:
    counter = iter(range(1000))

    def node(depth: int, budget: int) -> QuotaNode:
        name = f"n{next(counter)}"
        maximum = draw(st.integers(0, budget))
        minimum = draw(st.integers(0, maximum))
        if depth >= 2 or draw(st.booleans()):
            return QuotaNode(name, {GPU: minimum}, {GPU: maximum, MAX_JOBS: draw(
                st.integers(1, 6))}, namespaces=(f"ns-{name}",))
        count = draw(st.integers(1, 3))
        children = []
        left = minimum
        for _ in range(count):
            child = node(depth + 1, maximum)
            share = min(child.min.get(GPU, 0), left)
            left -= share
            children.append(QuotaNode(child.name, {GPU: share}, child.max, child.namespaces,
                                      child.children))
        return QuotaNode(name, {GPU: minimum}, {GPU: maximum}, children=tuple(children))

    return node(0, 16)


@settings(max_examples=200, deadline=None)
@given(trees(), st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6), st.integers(0, 3)),
                         max_size=30))
def test_random_streams_never_exceed_max_anywhere(root: QuotaNode,
                                                  stream: list[tuple[int, int, int]]) -> None:
    leaves = [p for p in walk(root) if p.node.is_leaf]
    pending = [job(f"j{i}", leaves[pick % len(leaves)].node.namespaces[0], gpus=gpus,
                   priority=prio, created=f"2026-01-01T00:00:{i:02d}Z")
               for i, (pick, gpus, prio) in enumerate(stream)]
    admission = AdmissionPass(root, [], pending)
    holding: dict[str, Job] = {}
    for i, candidate in enumerate(admission.candidates()):
        verdict = admission.check(candidate)
        if verdict.fits:
            admission.release(verdict.victims)
            admission.admit(candidate, f"2026-01-02T00:00:{i:02d}Z")
            for victim in verdict.victims:
                holding.pop(victim.job.key)
            holding[candidate.key] = candidate
        else:
            admission.wait(candidate)
    for placed in walk(root):  # recompute usage from what is admitted
        members = [j for j in holding.values()
                   if any(p.node.namespaces and j.namespace in p.node.namespaces
                          for p in walk(placed.node))]
        for resource, limit in placed.node.max.items():
            used = len(members) if resource == MAX_JOBS else sum(
                j.request.get(resource, 0) for j in members)
            assert used <= limit, f"{placed.key} {resource}: {used} > {limit}"
    # Never exceeding max is easy for an engine that admits nothing: it must also let in
    # what fits. A job that fits the empty tree on its own is admitted, or another one is.
    if any(fits(root, [j]) for j in pending):
        assert holding, "no job admitted though one fits the empty tree"
    # When the whole stream fits at every node at once, every job is admitted.
    if pending and fits(root, pending):
        assert set(holding) == {j.key for j in pending}


def fits(root: QuotaNode, together: list[Job]) -> bool:
    """Whether ``together``, held at once and nothing else, stays within max at every tree
    node (recomputed from scratch, not by the engine)."""
    for placed in walk(root):
        namespaces = {ns for p in walk(placed.node) for ns in p.node.namespaces}
        members = [j for j in together if j.namespace in namespaces]
        for resource, limit in placed.node.max.items():
            used = len(members) if resource == MAX_JOBS else sum(
                j.request.get(resource, 0) for j in members)
            if used > limit:
                return False
    return True


@settings(max_examples=200, deadline=None)
@given(trees(), st.integers(0, 40))
def test_a_leaf_within_its_min_always_gets_its_job_in(root: QuotaNode, seed: int) -> None:
    leaves = [p for p in walk(root) if p.node.is_leaf]
    target = leaves[seed % len(leaves)]
    others = [p for p in leaves if p is not target]
    holdings = []
    for i, other in enumerate(others):  # every other leaf greedily takes what its max allows
        for k in range(other.node.max.get(GPU, 0)):
            holdings.append(Holding(job(f"o{i}-{k}", other.node.namespaces[0], gpus=1),
                                    f"2026-01-01T00:00:{k:02d}Z"))
    admission = AdmissionPass(root, [], [])
    kept = []
    for h in holdings:
        if admission.check(h.job).fits:
            admission.admit(h.job, h.admitted)
            kept.append(h)
    guarantee = target.node.min.get(GPU, 0)
    want = job("mine", target.node.namespaces[0], gpus=guarantee)
    fresh = AdmissionPass(root, kept, [want])
    jobs_cap = min(p.node.max.get(MAX_JOBS, 10**9) for p in walk(root)
                   if target.path[:len(p.path)] == p.path)
    if guarantee and jobs_cap >= 1 and all(
            guarantee <= p.node.max.get(GPU, 10**9) for p in walk(root)
            if target.path[:len(p.path)] == p.path):
        assert fresh.check(want).fits
    # The other leaves were let in up to what the tree allows: an engine that admits nothing
    # would leave them all out.
    if any(fits(root, [h.job]) for h in holdings):
        assert kept, "no other leaf's job was admitted though one fits the empty tree"


def test_a_reclaim_takes_only_jobs_under_the_quota_in_its_way() -> None:
    """Two cohorts, each at its max: a claim in one takes back quota only from its own
    cohort's borrowers. A borrower of the other cohort, however young, frees nothing that is
    in its way (Kueue's reclaimWithinCohort reclaims within the cohort too)."""
    def cohort(name: str) -> QuotaNode:
        return QuotaNode(name, min={GPU: 8}, max={GPU: 8}, children=(
            QuotaNode(f"{name}1", min={GPU: 4}, max={GPU: 8}, namespaces=(f"{name}-1",)),
            QuotaNode(f"{name}2", min={GPU: 4}, max={GPU: 8}, namespaces=(f"{name}-2",))))
    root = QuotaNode("root", min={GPU: 16}, max={GPU: 16}, children=(cohort("a"), cohort("b")))
    policies = {f"root/{c}/{c}{i}": QueuePolicy.PRIORITY for c in "ab" for i in (1, 2)}
    held = [Holding(job(f"{c}{i}", f"{c}-1", gpus=2, created=f"2026-01-01T00:00:0{i}Z"),
                    f"2026-01-01T00:01:{i}{'0' if c == 'a' else '5'}Z")
            for c in "ab" for i in range(4)]  # each cohort's first leaf borrows all of it
    claim = job("claim", "a-2", gpus=2, created="2026-01-01T00:02:00Z")
    verdict = AdmissionPass(root, held, [claim], policies).check(claim)
    assert verdict.fits
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/a-1/a3"]


def test_a_job_whose_bind_is_being_written_is_never_reclaimed() -> None:
    """Its requeue would race the bind and lose: the quota given to the claimant would then
    be held twice (the hub's in-flight binds come to the pass as ``settling``)."""
    root, policies = two_teams()
    borrowed = [Holding(job(f"a{i}", "team-a", gpus=2, created=f"2026-01-01T00:00:0{i}Z"),
                        f"2026-01-01T00:01:0{i}Z") for i in range(4)]
    claim = job("b0", "team-b", gpus=4, created="2026-01-01T00:02:00Z")
    admission = AdmissionPass(root, borrowed, [claim], policies)
    admission.leaving(["PyTorchJob/team-a/a3"])
    assert [v.job.key for v in admission.check(claim).victims] == [
        "PyTorchJob/team-a/a2", "PyTorchJob/team-a/a1"]


def test_a_waiting_job_keeps_its_cohorts_quota_from_lower_priority_borrowers() -> None:
    """A large job that waits for its cohort's quota is not passed by smaller, lower-priority
    jobs of another leaf borrowing what frees up (at 10 % of Kueue's baseline its large jobs
    waited 80 s, Kueue's 9 s); jobs within their leaf's min, and higher-priority ones, go."""
    cohort = QuotaNode("c", min={GPU: 8}, max={GPU: 8}, children=(
        QuotaNode("a", min={GPU: 4}, max={GPU: 8}, namespaces=("team-a",)),
        QuotaNode("b", min={GPU: 4}, max={GPU: 8}, namespaces=("team-b",))))
    root = QuotaNode("root", min={GPU: 8}, max={GPU: 8}, children=(cohort,))
    policies = {"root/c/a": QueuePolicy.PRIORITY, "root/c/b": QueuePolicy.PRIORITY}
    held = [Holding(job("a0", "team-a", gpus=3), "2026-01-01T00:01:00Z"),
            Holding(job("b0", "team-b", gpus=2), "2026-01-01T00:01:00Z")]
    large = job("large", "team-a", gpus=4, priority=10, created="2026-01-01T00:02:00Z")
    borrower = job("borrower", "team-b", gpus=3, created="2026-01-01T00:02:01Z")
    within = job("within", "team-b", gpus=2, created="2026-01-01T00:02:02Z")
    urgent = job("urgent", "team-b", gpus=3, priority=20, created="2026-01-01T00:02:03Z")
    admission = AdmissionPass(root, held, [large, borrower, within, urgent], policies)
    assert not admission.check(large).fits
    verdict = admission.check(borrower)
    assert not verdict.fits
    assert verdict.reason == ("quota root/c is kept for PyTorchJob/team-a/large (priority 10), "
                              "which waits for it")
    assert admission.check(within).fits
    assert admission.check(urgent).fits


def test_a_blocker_says_its_amounts_as_a_person_reads_them() -> None:
    assert str(Blocker("root/a", "cpu", 1500, 20_000, 21_000)) == \
        "quota root/a: cpu used 1500m + requested 20 > max 21"
    assert str(Blocker("root/a", "memory", 2**31, 2**30, 3 * 2**30 - 1)) == \
        f"quota root/a: memory used 2Gi + requested 1Gi > max {3 * 2**30 - 1}"


def test_a_reclaim_gives_back_a_victim_a_later_one_makes_unneeded() -> None:
    """As Kueue's fill-back: victims are taken newest first until the claim fits; one taken
    before a larger one that alone makes room is not preempted."""
    root, policies = two_teams()
    held = [Holding(job("old", "team-a", gpus=4), "2026-01-01T00:01:01Z"),
            Holding(job("big", "team-a", gpus=3), "2026-01-01T00:01:02Z"),
            Holding(job("new", "team-a", gpus=1), "2026-01-01T00:01:03Z")]
    claim = job("b0", "team-b", gpus=3, created="2026-01-01T00:02:00Z")
    verdict = AdmissionPass(root, held, [claim], policies).check(claim)
    assert verdict.fits
    assert [v.job.key for v in verdict.victims] == ["PyTorchJob/team-a/big"]
