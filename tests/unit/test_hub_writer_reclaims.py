"""The hub's writer sends a bind that may spend a reclaim's quota only once the reclaim has
given it back: a reclaim that did not (its victim changed too often to be marked, or the
write failed) abandons the binds behind it, or the tree would be held above its max until
the next pass."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fleet.hub.cache import Body, Cache, Snapshot
from fleet.hub.writer import PassContext, Writer
from planner.intents import Bind, Requeue
from propagation.jobkey import JobKey
from tests.unit.test_preemption_views import pytorchjob


class Dispatcher:
    """The writes a reclaim makes, answered as the API server would have: ``answer`` says
    whether the victim's requeue mark is taken ("marked"), the victim ended since ("ended"),
    changed too often to be marked ("holding") or no answer came (None)."""

    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.requeued: list[str] = []

    def requeue_mark(self, job: Body, adapter: object, reason: str,
                     extra: dict[str, str] | None = None) -> tuple[Body | None, bool]:
        if self.answer is None:
            raise RuntimeError("the API server did not answer")
        self.requeued.append(job["metadata"]["name"])
        if self.answer == "marked":
            return {**job, "metadata": {**job["metadata"], "resourceVersion": "2"}}, False
        return None, self.answer == "holding"

    def event(self, obj: Body, reason: str, message: str, kind: str = "Normal") -> None:
        pass


class Binder:
    def __init__(self) -> None:
        self.bound: list[str] = []

    def bind(self, bind: Bind, job: Body, snap: Snapshot) -> None:
        self.bound.append(bind.job)


def _job(name: str, **kw: Any) -> Body:
    job = pytorchjob(name, **kw)
    job["metadata"]["resourceVersion"] = "1"
    return job


@pytest.mark.parametrize(("answer", "bound"), [("marked", True), ("ended", True),
                                               ("holding", False), (None, False)])
def test_a_bind_behind_a_reclaim_is_sent_only_when_the_reclaim_landed(
        answer: str | None, bound: bool) -> None:
    victim, claimant = _job("victim", bound=True, admitted=True), _job("claimant")
    cache = Cache()
    for job in (victim, claimant):
        cache.upsert("jobs", job)
    dispatcher, binder = Dispatcher(answer), Binder()
    writer = Writer(cache, dispatcher)  # type: ignore[arg-type]
    writer.binder = binder  # type: ignore[assignment]
    writer.moves.dispatcher = dispatcher  # type: ignore[assignment]
    keys = {JobKey.of_body(j): j for j in (victim, claimant)}
    victim_key, claimant_key = JobKey.of_body(victim), JobKey.of_body(claimant)
    writer.write([Requeue(victim_key, "reclaimed", claimant_key),
                  Bind(claimant_key, (), "placed")],
                 PassContext(cache.snapshot(), datetime(2026, 1, 1, tzinfo=UTC), keys))
    writer._binds.shutdown(wait=True)
    assert dispatcher.requeued == ([] if answer is None else ["victim"])
    assert binder.bound == ([claimant_key] if bound else [])
    assert not writer.inflight()  # an abandoned bind holds nothing

