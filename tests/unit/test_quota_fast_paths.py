"""The quota engine's indexed paths (claims by request shape, victims from per-leaf sorted
holdings) decide exactly as the plain definitions they replace, on random trees and streams."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quota.amounts import MAX_JOBS, add
from quota.engine import (
    AdmissionPass,
    Blocker,
    Holding,
    Job,
    QueuePolicy,
    order_key,
)
from quota.ledger import QuotaLedger, _desc
from quota.tree import PlacedNode, QuotaNode, walk
from tests.unit.test_quota import GPU, trees


class PlainPass(AdmissionPass):
    """The engine with its claims and reclaim victims computed as first written: every
    pending job sorted and tested, every borrower's holding sorted, on each call."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._members: dict[str, list[Holding]] = {key: [] for key in self._nodes}
        for holding in self.ledger.holdings.values():
            leaf = self.leaf(holding.job)
            if leaf is not None:
                self._members[leaf.key].append(holding)

    def _charge(self, holding: Holding) -> None:
        super()._charge(holding)
        leaf = self.leaf(holding.job)
        if leaf is not None:
            self._members[leaf.key].append(holding)

    def _release(self, holding: Holding) -> None:
        super()._release(holding)
        leaf = self.leaf(holding.job)
        if leaf is not None:
            self._members[leaf.key] = [h for h in self._members[leaf.key]
                                       if h.job.key != holding.job.key]

    def _claims(self) -> dict[str, Job]:
        claims: dict[str, Job] = {}
        for other in sorted(self.pending, key=order_key):
            place = self.leaf(other)
            if (place is None or place.key in claims or other.key in self._done
                    or not self._within_guarantee(place, other)):
                continue
            if self._blockers(place, other.charge):
                claims[place.key] = other
        return claims

    def bypassed(self, job: Job, up_to: int | None = None) -> int:
        leaf = self.leaf(job)
        if leaf is None:
            return 0
        count = sum(1 for h in self._members[leaf.key]
                    if h.admitted > job.created and order_key(h.job) > order_key(job))
        return count if up_to is None else min(count, up_to)

    def _reclaim(self, leaf: PlacedNode, job: Job,
                 _: tuple[Blocker, ...] = ()) -> tuple[Holding, ...]:
        blockers = self._blockers(leaf, job.charge)
        if any(b.node == leaf.key for b in blockers):
            return ()
        within = add(self._usage[leaf.key], job.charge)
        for blocker in blockers:
            guarantee = leaf.node.min.get(blocker.resource)
            if guarantee is None or within.get(blocker.resource, 0) > guarantee:
                return ()
        usage = {k: dict(v) for k, v in self._usage.items()}
        members = {k: list(v) for k, v in self._members.items()}
        victims: list[Holding] = []
        while blockers := self._blockers(leaf, job.charge, usage):
            deepest: dict[str, str] = {}
            for b in blockers:
                deepest.setdefault(b.resource, b.node)
            candidates = []
            for key, holdings in members.items():
                node = self._nodes[key].node
                used = usage[key]
                if key != leaf.key and node.is_leaf and any(
                        used.get(r, 0) > node.min.get(r, 0) for r in used if r != MAX_JOBS):
                    # never a job admitted in this pass: its bind and requeue would race;
                    # only one under the deepest node in the way, holding what is short
                    candidates.extend(h for h in holdings if h.job.key not in self._done
                                      and any(n in self._paths[key] and h.job.charge.get(r)
                                              for r, n in deepest.items()))
            candidates.sort(key=lambda h: (h.job.priority, _desc(h.admitted), h.job.key))
            if not candidates:
                return ()
            victim = candidates[0]
            other = self.leaf(victim.job)
            assert other is not None
            for key in self._paths[other.key]:
                usage[key] = add(usage[key], {k: -v for k, v in victim.job.charge.items()})
            members[other.key] = [h for h in members[other.key] if h is not victim]
            victims.append(victim)
        for victim in reversed(victims[:-1]):  # the fill-back, newest taken first
            paths = self._paths[self.leaf(victim.job).key]  # type: ignore[union-attr]
            restored = {k: add(v, victim.job.charge) if k in paths else v
                        for k, v in usage.items()}
            if not self._blockers(leaf, job.charge, restored):
                usage = restored
                victims.remove(victim)
        return tuple(victims)


@st.composite
def borrowing_trees(draw: st.DrawFn) -> QuotaNode:
    """A root whose leaves (some under a cohort) split its GPUs as guarantees and may each
    borrow all of them: where reclaims and claims happen."""
    total = draw(st.integers(2, 16))
    left, counter = total, iter(range(100))

    def leaf() -> QuotaNode:
        nonlocal left
        name = f"l{next(counter)}"
        share = draw(st.integers(0, left))
        left -= share
        jobs = {MAX_JOBS: draw(st.integers(1, 8))} if draw(st.booleans()) else {}
        return QuotaNode(name, {GPU: share}, {GPU: total, **jobs}, namespaces=(f"ns-{name}",))

    children: list[QuotaNode] = []
    for _ in range(draw(st.integers(2, 4))):
        if draw(st.booleans()):
            kids = (leaf(), leaf())
            children.append(QuotaNode(f"c{next(counter)}", {GPU: sum(k.min[GPU] for k in kids)},
                                      {GPU: total}, children=kids))
        else:
            children.append(leaf())
    return QuotaNode("root", {GPU: total}, {GPU: total}, children=tuple(children))


# Time stamps of different lengths: preemption order compares them as text.
STAMPS = ("2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "2026-01-01T00:00:1", "", "9")


@st.composite
def streams(draw: st.DrawFn, leaves: list[PlacedNode], prefix: str) -> list[Job]:
    out = []
    for i in range(draw(st.integers(0, 25))):
        leaf = draw(st.sampled_from(leaves))
        request = {GPU: draw(st.integers(0, 6))}
        if draw(st.booleans()):
            request["cpu"] = draw(st.sampled_from((0, 1000, 4000)))
        out.append(Job(f"PyTorchJob/{leaf.node.namespaces[0]}/{prefix}{i}",
                       leaf.node.namespaces[0], request, draw(st.integers(0, 2)),
                       draw(st.sampled_from(STAMPS))))
    return out


@settings(max_examples=150, deadline=None)
@given(st.one_of(trees(), borrowing_trees()), st.data())
def test_indexed_paths_decide_as_the_plain_ones(root: QuotaNode, data: st.DataObject) -> None:
    leaves = [p for p in walk(root) if p.node.is_leaf]
    held = [Holding(j, data.draw(st.sampled_from(STAMPS)))
            for j in data.draw(streams(leaves, "h"))]
    policies = {p.key: data.draw(st.sampled_from(list(QueuePolicy))) for p in leaves}
    bound = data.draw(st.integers(0, 3))
    engines = [cls(root, held, [], policies, bound) for cls in (AdmissionPass, PlainPass)]
    for round_ in range(2):  # a second pass with the usage the first one left
        pending = data.draw(streams(leaves, f"p{round_}-"))
        for engine in engines:
            engine.next_pass(pending)
        fast, plain = engines
        assert fast.candidates() == plain.candidates()
        for i, job in enumerate(fast.candidates()):
            assert fast._claims() == plain._claims()
            verdict = fast.check(job)
            assert verdict == plain.check(job), job
            stamp = STAMPS[i % len(STAMPS)]
            if verdict.fits and verdict.victims:
                reclaim_now = data.draw(st.booleans())
                for engine in engines:
                    engine.release(verdict.victims)
                    if reclaim_now:
                        engine.admit(job, stamp)
                    else:
                        engine.wait(job)  # as the hub does: admitted once the victims go
            elif verdict.fits:
                for engine in engines:
                    engine.admit(job, stamp)
            else:
                for engine in engines:
                    engine.wait(job)
            assert fast.bypassed(job) == plain.bypassed(job)
        assert fast.queues() == plain.queues()
        assert {k: fast.usage(k) for k in fast._nodes} == {k: plain.usage(k) for k in plain._nodes}


def test_the_earliest_claim_of_another_leaf_pauses_borrowing() -> None:
    """Two leaves wait within their guarantees; a third leaf's job beyond its own min is
    told of the claim that comes first in admission order, whichever leaf it is in."""
    def cohort(name: str) -> QuotaNode:  # its guaranteed leaf waits: the borrower holds all
        return QuotaNode(f"cohort-{name}", {GPU: 2}, {GPU: 2}, children=(
            QuotaNode(name, {GPU: 2}, {GPU: 2}, namespaces=(name,)),
            QuotaNode(f"{name}2", {}, {GPU: 2}, namespaces=(f"{name}2",))))

    root = QuotaNode("root", {GPU: 4}, {GPU: 100}, children=(
        cohort("a"), cohort("b"), QuotaNode("c", {}, {GPU: 100}, namespaces=("c",))))
    held = [Holding(Job(f"PyTorchJob/{n}/h", n, {GPU: 2}, 0, "0"), "1") for n in ("a2", "b2")]
    late_a = Job("PyTorchJob/a/x", "a", {GPU: 2}, 0, "2026-01-01T00:00:09Z")
    early_b = Job("PyTorchJob/b/y", "b", {GPU: 2}, 0, "2026-01-01T00:00:01Z")
    big_a = Job("PyTorchJob/a/big", "a", {GPU: 3}, 0, "2026-01-01T00:00:00Z")  # beyond min
    greedy = Job("PyTorchJob/c/z", "c", {GPU: 1}, 5, "2026-01-01T00:00:00Z")
    pending = [late_a, early_b, big_a, greedy]
    for engine in (AdmissionPass(root, held, pending), PlainPass(root, held, pending)):
        assert "while PyTorchJob/b/y waits" in engine.check(greedy).reason


@settings(max_examples=100, deadline=None)
@given(st.one_of(trees(), borrowing_trees()), st.data())
def test_a_ledger_carried_forward_equals_one_built_at_once(root: QuotaNode,
                                                           data: st.DataObject) -> None:
    """Holdings added and removed over several passes leave the ledger that building it from
    the holdings then would: usage, victim order and admission order alike."""
    leaves = [p for p in walk(root) if p.node.is_leaf]
    ledger = QuotaLedger.of(root, [])
    held: dict[str, Holding] = {}
    for round_ in range(3):
        jobs = data.draw(streams(leaves, f"r{round_}-"))
        if round_ == 0:
            jobs.append(Job("PyTorchJob/nobody/x", "nobody", {GPU: 1}))  # in no leaf
        added = [Holding(j, data.draw(st.sampled_from(STAMPS))) for j in jobs]
        removed = [k for k in sorted(held) if data.draw(st.booleans())]
        if held and data.draw(st.booleans()):  # one held again, admitted anew
            again = held[sorted(held)[0]]
            added.append(Holding(again.job, "9"))
        ledger = ledger.changed(added, removed)
        for key in removed:
            held.pop(key)
        held.update({h.job.key: h for h in added if h.job.namespace != "nobody"})
        assert ledger == QuotaLedger.of(root, held.values())
