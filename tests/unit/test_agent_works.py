"""The agent's Work parts, each on its own: the book, the applier, the remover, the status
reporter (driven by changes), the watch's fences and the informer beneath it.

The API servers here are recorders: these tests check which requests each part decides to
send and when, not how an API server answers (the e2e suite runs the same parts against real
ones: fencing, reservations, drift, purge modes)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any, cast

from fleet.api import protocol
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.informer import DELETED, Informer
from fleet.clients.kube import Kube
from fleet.hub import works as w
from fleet.kinds import adapter_for
from member_agent.controllers.runtime import key_of
from member_agent.state import MemberState
from member_agent.works.applying import DRIFT_GRACE_SECONDS
from member_agent.works.book import WorkBook
from member_agent.works.sync import WorkSync
from member_agent.works.watch import WorkWatch

Body = dict[str, Any]
CLUSTER = "m1"


class Recorder:
    """Records every request; ``watch`` plays scripted event lists, one per call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []  # (verb, resource, name)
        self.patches: list[tuple[str, Any, str | None]] = []
        self.listed: list[Body] = []
        self.watches: list[list[tuple[str, Body]] | errors.ApiError] = []
        self.objects: dict[str, Body] = {}  # what a patch starts from, by name

    def apply(self, resource: r.Resource, body: Body, **_: Any) -> Body:
        self.calls.append(("apply", resource.plural, body["metadata"]["name"]))
        return copy.deepcopy(body)

    def patch(self, resource: r.Resource, name: str, patch: Any, namespace: str | None = None,
              subresource: str | None = None) -> Body:
        self.calls.append(("patch", resource.plural + (f"/{subresource}" if subresource
                                                       else ""), name))
        self.patches.append((name, patch, subresource))
        patched = copy.deepcopy(self.objects.get(name, {"metadata": {"name": name}}))
        patched["metadata"] |= (patch.get("metadata") or {})
        return patched

    def delete(self, resource: r.Resource, name: str, namespace: str | None = None,
               **_: Any) -> bool:
        self.calls.append(("delete", resource.plural, name))
        return True

    def create(self, resource: r.Resource, body: Body, **_: Any) -> Body:
        self.calls.append(("create", resource.plural, body["metadata"]["name"]))
        return body

    def list(self, resource: r.Resource, namespace: str | None = None,
             **_: Any) -> tuple[list[Body], str]:
        self.calls.append(("list", resource.plural, ""))
        return copy.deepcopy(self.listed), "100"

    def watch(self, resource: r.Resource, namespace: str | None = None,
              **_: Any) -> Iterator[tuple[str, Body]]:
        script = self.watches.pop(0) if self.watches else errors.Unreachable(0, "", "done")
        if isinstance(script, errors.ApiError):
            raise script
        yield from script


def a_work(name: str = "j", generation: int = 1, **placement: Any) -> Body:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                        "generation": 1, "annotations": {}},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {
               "spec": {"containers": [{"name": "pytorch", "image": "x"}]}}}}}}
    adapter = adapter_for(job["apiVersion"], job["kind"])
    share = {"cluster": CLUSTER, "replicas": {"Master": 1}, "offsets": {"Master": 0}}
    config = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "common", "namespace": "default"}}
    work = w.work_body(job, adapter, share, [share], deps=[config])
    work["metadata"] |= {"uid": f"w-{name}", "resourceVersion": "7", "generation": generation,
                         "creationTimestamp": "2026-01-01T00:00:00Z"}
    work["spec"]["placement"] |= placement
    return work


def member_copy(work: Body) -> Body:
    """The member job as the member's cache would hold it once applied."""
    job = copy.deepcopy(work["spec"]["manifests"][0])
    job["metadata"]["uid"] = "member-" + job["metadata"]["name"]
    return job


def a_sync() -> tuple[WorkSync, Recorder, Recorder]:
    hub, member = Recorder(), Recorder()
    state = MemberState()
    state.synced.set()
    sync = WorkSync(cast(Kube, hub), cast(Kube, member), CLUSTER, state)
    sync.status.hold = 0.0  # every change written at once (the hold has a test of its own)
    return sync, hub, member


# -- the book ------------------------------------------------------------------------------
def test_the_book_records_each_work_once_and_finds_it_by_job() -> None:
    book = WorkBook(clock=lambda: 5.0)
    work = a_work()
    assert book.record(work) == (True, None)
    assert book.is_applied(work)
    assert not book.is_applied(a_work(generation=2))
    newer = a_work(generation=2)
    assert book.record(newer) == (False, work)
    name = work["metadata"]["name"]
    assert book.names_of(key_of(work["spec"]["manifests"][0])) == {name}
    assert book.to_apply_again(name)
    assert not book.to_apply_again(name)  # once
    assert not book.is_applied(newer)
    other = a_work("k")
    book.record(other)
    assert ("ConfigMap", "default", "common") in book.used_by_others(name)
    book.drop(name)
    assert book.get(name) is None
    assert not book.names_of(key_of(work["spec"]["manifests"][0]))


def test_the_book_knows_its_reserving_works_without_a_scan() -> None:
    book = WorkBook(clock=lambda: 5.0)
    reserving = a_work("r", phase=protocol.PHASE_RESERVE)
    book.record(reserving)
    book.record(a_work("p"))
    assert book.reserving() == [reserving["metadata"]["name"]]
    book.update(a_work("r"))  # the hub committed it: no phase any more
    assert book.reserving() == []
    book.update(reserving)
    book.drop(reserving["metadata"]["name"])
    assert book.reserving() == []


# -- applying, purging, releasing ----------------------------------------------------------
def test_a_work_is_applied_dependencies_first_and_once_per_generation() -> None:
    sync, hub, member = a_sync()
    work = a_work()
    sync.handle(work, deleted=False)
    assert [c for c in member.calls if c[0] == "apply"] == [
        ("apply", "namespaces", "default"), ("apply", "configmaps", "common"),
        ("apply", "pytorchjobs", "j")]
    assert not hub.calls  # the hub set our finalizer already: no write to the hub
    member.calls.clear()
    sync.handle(copy.deepcopy(work), deleted=False)  # its status changed, say
    assert not member.calls
    sync.handle(a_work(generation=2), deleted=False)
    assert ("apply", "pytorchjobs", "j") in member.calls


def test_a_work_without_our_finalizer_gets_it_before_its_apply() -> None:
    sync, hub, _ = a_sync()
    work = a_work()
    work["metadata"]["finalizers"] = []
    hub.objects[work["metadata"]["name"]] = work
    sync.handle(work, deleted=False)
    assert hub.calls[0] == ("patch", "works", work["metadata"]["name"])
    assert hub.patches[0][1]["metadata"]["finalizers"] == [protocol.AGENT_FINALIZER]


def test_purge_removes_the_objects_then_drops_the_finalizer_and_keeps_ones_others_use() -> None:
    sync, hub, member = a_sync()
    first, second = a_work("j"), a_work("k")
    for work in (first, second):
        sync.handle(work, deleted=False)
    member.calls.clear()
    going = copy.deepcopy(first)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    sync.handle(going, deleted=False)
    assert member.calls == [("delete", "pytorchjobs", "j")]  # the ConfigMap k uses stays
    assert hub.patches[-1][1]["metadata"]["finalizers"] == []
    assert sync.book.get(first["metadata"]["name"]) is None
    member.calls.clear()
    sync.handle(going, deleted=True)  # our own purge: its DELETED is no news
    assert not member.calls


class ChangingMember(Recorder):
    """A member whose job changes once more after the agent read it: the first deletion
    at the version read is refused, and the member's watch then brings the new version."""

    def __init__(self, then: Body, stores: Any) -> None:
        super().__init__()
        self.then, self.stores, self.refused = then, stores, 0

    def delete(self, resource: r.Resource, name: str, namespace: str | None = None,
               **options: Any) -> bool:
        version = options.get("resource_version")
        if version is not None and version != self.then["metadata"]["resourceVersion"]:
            self.refused += 1
            self.stores.put_job(key_of(self.then), self.then)
            raise errors.Conflict(409, "Conflict", "the object has been modified")
        return super().delete(resource, name, namespace, **options)


def test_a_job_that_ends_between_its_last_report_and_its_purge_is_told_as_ended() -> None:
    sync, hub, _ = a_sync()
    work = a_work()
    sync.handle(work, deleted=False)
    running = member_copy(work) | {"status": {"conditions": [
        {"type": "Running", "status": "True"}]}}
    running["metadata"]["resourceVersion"] = "1"
    sync.state.stores.put_job(key_of(running), running)
    ended = copy.deepcopy(running) | {"status": {"conditions": [
        {"type": "Succeeded", "status": "True"}]}}
    ended["metadata"]["resourceVersion"] = "2"
    member = ChangingMember(ended, sync.state.stores)
    sync.remover.member = cast(Kube, member)
    going = copy.deepcopy(work)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    sync.handle(going, deleted=False)
    assert member.refused == 1
    assert ("delete", "pytorchjobs", "j") in member.calls
    states = [patch["status"].get("state") for _, patch, sub in hub.patches
              if sub == "status" and "state" in patch.get("status", {})]
    assert states[-1] == protocol.SUCCEEDED  # told before its copy went
    assert hub.patches[-1][1]["metadata"]["finalizers"] == []


def test_a_work_deleted_without_the_agent_has_its_copy_removed_unless_kept() -> None:
    sync, _, member = a_sync()
    work = a_work()
    sync.handle(work, deleted=False)
    member.calls.clear()
    sync.handle(work, deleted=True)
    assert ("delete", "pytorchjobs", "j") in member.calls

    sync, _, member = a_sync()
    kept = a_work()
    kept["metadata"]["annotations"][protocol.PURGE_MODE] = protocol.PURGE_NEVER
    sync.handle(kept, deleted=False)
    member.calls.clear()
    sync.handle(kept, deleted=True)
    assert not member.calls


def test_the_sweep_removes_a_stale_copy_once_the_works_are_listed() -> None:
    sync, _, member = a_sync()
    work = a_work()
    job = member_copy(work)  # applied from the Work, which the hub no longer has
    sync.state.stores.put_job(key_of(job), job)
    sync.remover.sweep({}, synced=False)  # before the list an absent Work means nothing
    assert not member.calls
    sync.remover.sweep({}, synced=True)
    assert member.calls == [("delete", "pytorchjobs", "j")]


def test_a_job_deleted_on_the_member_is_applied_again_after_a_grace() -> None:
    sync, _, _ = a_sync()
    now = [0.0]
    sync.book = sync.applier.book = WorkBook(clock=lambda: now[0])
    work = a_work()
    sync.book.record(work)
    name = work["metadata"]["name"]
    assert sync.applier.drifted(lambda n: work) == []  # just applied: its job may lag
    now[0] = DRIFT_GRACE_SECONDS + 1
    going = copy.deepcopy(work)
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert sync.applier.drifted(lambda n: going) == []  # being purged: gone on purpose
    assert sync.applier.drifted(lambda n: work) == [work]
    assert sync.applier.drifted(lambda n: work) == []  # once, until applied again
    assert not sync.book.is_applied(work)
    assert sync.book.get(name) is not None


def test_pods_of_a_removed_copy_go_when_the_garbage_collector_does_not_come() -> None:
    sync, _, member = a_sync()
    work = a_work()
    job = member_copy(work)
    pod = {"metadata": {"name": "j-master-0", "namespace": "default", "uid": "p1",
                        "labels": {protocol.JOB_UID: "uid-j"},
                        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "controller": True,
                                             "kind": "PyTorchJob", "name": "j",
                                             "uid": job["metadata"]["uid"]}]}}
    sync.state.stores.put_job(key_of(job), job)
    sync.state.stores.put_pod(pod, False)
    jobs = dict(sync.state.stores.all_jobs())
    sync.remover.sweep_orphaned_pods(jobs, now=100.0)
    assert not member.calls  # its job is there: not an orphan
    sync.state.stores.put_job(key_of(job), None)  # the copy was removed
    sync.remover.sweep_orphaned_pods({}, now=100.0)
    sync.remover.sweep_orphaned_pods({}, now=105.0)
    assert not member.calls  # the member's garbage collector gets its grace
    sync.remover.sweep_orphaned_pods({}, now=111.0)
    assert member.calls == [("delete", "pods", "j-master-0")]


def test_a_pod_is_kept_once_for_capacity_and_for_its_job() -> None:
    state = MemberState()
    pod = {"metadata": {"name": "j-master-0", "namespace": "default", "uid": "p1",
                        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "controller": True,
                                             "kind": "PyTorchJob", "name": "j", "uid": "u"}]},
           "spec": {"nodeName": ""}}
    key = state.put_pod(pod, False)
    assert key is not None
    assert key.endswith("/default/j")
    pod["spec"]["nodeName"] = "n1"  # the caller's dict is its own: neither store changes
    _, pods = state.stores.read(key)
    assert [p["spec"]["nodeName"] for p in pods] == [""]
    assert state.snapshot()[1] == pods
    assert state.put_pod(pod, True) == key
    assert state.snapshot()[1] == []
    assert state.stores.read(key)[1] == []


# -- status, driven by changes -------------------------------------------------------------
def test_status_is_written_when_the_job_or_its_pods_change_and_only_then() -> None:
    sync, hub, _ = a_sync()
    work = a_work()
    sync.handle(work, deleted=False)
    name = work["metadata"]["name"]
    assert sync.status.take_marked() == {name}  # applied: look at it
    job = member_copy(work)
    stores = sync.state.stores
    stores.put_job(key_of(job), job)
    assert sync.status.take_marked() == {name}  # its job changed
    sync.status.report({name})
    writes = [c for c in hub.calls if c[1] == "works/status"]
    assert len(writes) == 1
    sync.status.report({name})  # nothing new: no write
    assert len([c for c in hub.calls if c[1] == "works/status"]) == 1
    pod = {"metadata": {"name": "j-master-0", "namespace": "default", "uid": "p1",
                        "labels": {"training.kubeflow.org/replica-type": "master"},
                        "ownerReferences": [{"apiVersion": "kubeflow.org/v1",
                                             "kind": "PyTorchJob", "name": "j",
                                             "uid": job["metadata"]["uid"],
                                             "controller": True}]},
           "spec": {"nodeName": "n1", "containers": [{"name": "pytorch"}]},
           "status": {"phase": "Running"}}
    stores.put_pod(pod, False)
    assert sync.status.take_marked() == {name}  # one of its pods changed
    sync.status.report({name})
    status = hub.patches[-1][1]["status"]
    assert status["pods"][0]["phase"] == "Running"
    assert status["boundTime"]
    other = {**job, "metadata": {**job["metadata"], "name": "unrelated"}}
    stores.put_job(key_of(other), other)
    assert sync.status.take_marked() == set()  # no Work of ours carries it


def test_a_change_short_of_the_end_waits_its_hold_and_the_end_is_told_at_once() -> None:
    sync, hub, _ = a_sync()
    now = [100.0]
    sync.status.hold, sync.status.clock = 1.0, lambda: now[0]
    work = a_work()
    sync.handle(work, deleted=False)
    name = work["metadata"]["name"]
    job = member_copy(work)
    sync.state.stores.put_job(key_of(job), job)
    sync.status.report(sync.status.take_marked())
    assert not [c for c in hub.calls if c[1] == "works/status"]  # applied: held
    assert sync.status.next_held() == 1.0
    assert sync.status.take_due() == set()
    now[0] = 101.0
    assert sync.status.take_due() == {name}
    sync.status.report({name})
    assert hub.patches[-1][1]["status"]["state"] == "Applied"
    now[0] = 101.5  # running, half a second after the last write: held again
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    sync.state.stores.put_job(key_of(job), job)
    sync.status.report(sync.status.take_marked())
    assert len([c for c in hub.calls if c[1] == "works/status"]) == 1
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    sync.state.stores.put_job(key_of(job), job)  # its end: told at once
    sync.status.report(sync.status.take_marked())
    assert hub.patches[-1][1]["status"]["state"] == "Succeeded"
    now[0] = 102.0  # the held change's time: nothing new to write
    sync.status.report(sync.status.take_due())
    assert len([c for c in hub.calls if c[1] == "works/status"]) == 2


def test_a_status_the_hub_refuses_is_tried_again_and_holds_up_nothing_else() -> None:
    sync, hub, _ = a_sync()
    works = [a_work("a"), a_work("b")]
    for work in works:
        sync.handle(work, deleted=False)
    sync.status.take_marked()

    def refuse(*_: Any, **__: Any) -> Body:
        raise errors.Unreachable(0, "Unreachable", "hub down")

    hub.patch = refuse  # type: ignore[method-assign]
    names = {work["metadata"]["name"] for work in works}
    assert sync.status.report(names) is False
    assert sync.status.take_marked() == names  # both looked at again next round


def test_the_status_loop_wakes_on_a_change_not_on_a_timer() -> None:
    sync, hub, _ = a_sync()
    sync.status.batch, sync.status.resync = 0.01, 3600.0
    work = a_work()
    sync.handle(work, deleted=False)
    stop = threading.Event()
    loop = threading.Thread(target=sync.status.run, args=(stop,), daemon=True)
    loop.start()
    try:
        job = member_copy(work)
        sync.state.stores.put_job(key_of(job), job)
        deadline = threading.Event()
        for _ in range(200):
            if any(c[1] == "works/status" for c in hub.calls):
                break
            deadline.wait(0.01)
        assert any(c[1] == "works/status" for c in hub.calls)
    finally:
        stop.set()
        sync.status.mark()  # wake it to stop
        loop.join(2)


# -- the watch and its informer ------------------------------------------------------------
def test_fences_follow_the_watch_and_a_relist_hands_over_what_vanished() -> None:
    hub = Recorder()
    seen: list[tuple[str, bool]] = []
    watch = WorkWatch(cast(Kube, hub), protocol.member_namespace(CLUSTER),
                      on_work=lambda work, deleted: seen.append(
                          (work["metadata"]["name"], deleted)))
    first, second = a_work("a"), a_work("b")
    hub.listed = [first, second]
    informer = watch.informer
    informer.relist()
    assert watch.synced.is_set()
    assert set(watch.fences()) == {first["metadata"]["name"], second["metadata"]["name"]}
    hub.listed = [first]  # b was deleted while the watch was down
    informer.relist()
    assert (second["metadata"]["name"], True) in seen
    assert set(watch.fences()) == {first["metadata"]["name"]}
    job = member_copy(second)
    assert not watch.may_run(job, key_of(job))  # its Work is gone: no pods
    assert watch.may_run(member_copy(first), key_of(member_copy(first)))


def test_the_informer_lists_again_after_an_expired_watch() -> None:
    hub = Recorder()
    events: list[tuple[str, str]] = []
    stop = threading.Event()

    def handle(kind: str, body: Body) -> None:
        events.append((kind, body["metadata"]["name"]))
        if len(events) >= 4:
            stop.set()

    hub.listed = [a_work("a")]
    hub.watches = [errors.ApiError(410, "Expired", "too old"),
                   [("ADDED", a_work("b")), ("DELETED", a_work("a"))]]
    Informer(cast(Kube, hub), r.WORKS, "ns", handle=handle, pause=0).run(stop)
    assert [c for c in hub.calls if c[0] == "list"] == [("list", "works", "")] * 2
    name_a, name_b = a_work("a")["metadata"]["name"], a_work("b")["metadata"]["name"]
    assert events == [("ADDED", name_a), ("MODIFIED", name_a), ("ADDED", name_b),
                      (DELETED, name_a)]


def test_a_kind_the_api_server_does_not_serve_counts_as_synced_and_empty() -> None:
    hub = Recorder()
    stop = threading.Event()
    events: list[tuple[str, str]] = []
    informer = Informer(cast(Kube, hub), r.WORKS, "ns", pause=0,
                        handle=lambda kind, body: events.append((kind, body["metadata"]["name"])))
    hub.listed = [a_work("a")]
    informer.relist()

    def absent(*_: Any, **__: Any) -> Any:
        raise errors.NotFound(404, "NotFound", "the server could not find the resource")

    hub.list = absent  # type: ignore[method-assign]
    hub.watches = [errors.Unreachable(0, "", "broken")]  # lists again, and finds no kind
    informer.synced.clear()
    loop = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    loop.start()
    try:
        assert informer.synced.wait(5)
        assert events[-1] == (DELETED, a_work("a")["metadata"]["name"])  # its CRD went
        assert informer.items() == []
    finally:
        stop.set()
        loop.join(5)


def test_a_work_changed_while_its_write_is_under_way_is_written_again() -> None:
    """Writes do not wait for a round: each starts at once, and a change that comes while
    its Work's write is under way (which may have read the state before it) is written
    after it, never lost."""
    sync, hub, _ = a_sync()
    work = a_work()
    name = work["metadata"]["name"]
    sync.handle(work, deleted=False)
    sync.status.take_marked()
    entered, gate = threading.Event(), threading.Event()
    write = hub.patch

    def slow(*args: Any, **kwargs: Any) -> Body:
        entered.set()
        gate.wait(5)
        return write(*args, **kwargs)

    hub.patch = slow  # type: ignore[method-assign]
    job = member_copy(work)
    sync.state.stores.put_job(key_of(job), job)
    sync.status.send(sync.status.take_marked())
    assert entered.wait(5)
    sync.status.send([name])  # changed again meanwhile
    assert sync.status.take_marked() == set()  # not yet: after the write under way
    gate.set()
    assert marked_again(sync, name), "the change during the write was lost"


def test_the_last_word_before_a_purge_lands_after_a_write_under_way() -> None:
    """The loop's write of a running job is under way when the job ends and its Work is
    deleted: the purge's report (succeeded) waits for it and lands last. Landing first, the
    older write would be the Work's last word, and the hub would run the job again."""
    sync, hub, _ = a_sync()
    work = a_work()
    name = work["metadata"]["name"]
    sync.handle(work, deleted=False)
    sync.status.take_marked()
    running = member_copy(work) | {"status": {"conditions": [
        {"type": "Running", "status": "True"}]}}
    sync.state.stores.put_job(key_of(running), running)
    entered, gate = threading.Event(), threading.Event()
    write, calls = hub.patch, []

    def first_slow(*args: Any, **kwargs: Any) -> Body:
        calls.append(args)
        if len(calls) == 1:
            entered.set()
            gate.wait(5)
        return write(*args, **kwargs)

    hub.patch = first_slow  # type: ignore[method-assign]
    sync.status.send([name])
    assert entered.wait(5)
    ended = copy.deepcopy(running) | {"status": {"conditions": [
        {"type": "Succeeded", "status": "True"}]}}
    sync.state.stores.put_job(key_of(ended), ended)
    last_word = threading.Thread(target=sync.status.report, args=([name],))
    last_word.start()
    last_word.join(0.3)
    assert last_word.is_alive(), "the last word did not wait for the write under way"
    gate.set()
    last_word.join(5)
    states = [patch["status"].get("state") for _, patch, sub in hub.patches
              if sub == "status" and "state" in patch.get("status", {})]
    assert states[-1] == protocol.SUCCEEDED


def test_a_refused_write_is_tried_again_after_a_pause() -> None:
    sync, hub, _ = a_sync()
    work = a_work()
    name = work["metadata"]["name"]
    sync.handle(work, deleted=False)
    sync.status.take_marked()

    def refuse(*_: Any, **__: Any) -> Body:
        raise errors.Unreachable(0, "Unreachable", "hub down")

    hub.patch = refuse  # type: ignore[method-assign]
    job = member_copy(work)
    sync.state.stores.put_job(key_of(job), job)
    sync.status.send(sync.status.take_marked())
    assert marked_again(sync, name), "a refused write was not marked to be tried again"
    assert sync.status._refused  # the loop pauses before its next round


def marked_again(sync: Any, name: str, seconds: float = 5.0) -> bool:
    """Whether the Work is marked to be looked at again within ``seconds`` (a write off the
    loop's thread lands first)."""
    for _ in range(int(seconds / 0.01)):
        if sync.status.take_marked() == {name}:
            return True
        threading.Event().wait(0.01)
    return False
