"""The dashboard's views from a real scheduler's passes (the bench's in-memory hub), its
server's rules (leader only, loopback only, read-only, bounded), and the CLI's forwarding."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from e2e.bench.passes import scale_hub, settle
from fleet.api.protocol import (
    FAILOVER_AVOID,
    FAILOVER_SINCE,
    HUB_DASHBOARD,
    HUB_POD,
    PREEMPTED_BY,
    REQUEUE,
    REQUEUED_AT,
)
from fleet.cli import dashboard as cli
from fleet.cli.config import CliError
from fleet.hub.dashboard import pages
from fleet.hub.dashboard.history import MAX_QUEUES, History
from fleet.hub.dashboard.server import Board, Leader, serve, whereabouts
from fleet.hub.reporting import Offer
from fleet.hub.scheduler import Scheduler
from planner.intents import QueueReport


@pytest.fixture(scope="module")
def hub() -> Scheduler:
    scheduler, _ = scale_hub(members=3, nodes=4, jobs=40)
    for _ in range(3):
        scheduler.pass_once()
        settle(scheduler)
    return scheduler


def latest(hub: Scheduler) -> tuple[Offer, QueueReport]:
    offer, report = hub.reporting.latest()
    assert offer is not None
    assert report is not None
    return offer, report


def test_members_show_every_member_by_shape(hub: Scheduler) -> None:
    offer, report = latest(hub)
    shown = pages.members(offer.snap, offer.clusters, report.cells)["members"]
    assert [m["name"] for m in shown] == ["member000", "member001", "member002"]
    for member in shown:
        body = next(b for b in offer.snap.clusters.values()
                    if b["metadata"]["name"] == member["name"])
        capacity = body["status"]["capacity"]
        assert sum(s["gpus"]["total"] for s in member["shapes"]) == \
            capacity["allocatable"]["nvidia.com/gpu"] == member["gpus"]["total"]
        assert sum(s["nodes"] for s in member["shapes"]) == 4
        assert member["ready"]
        assert not member["stale"]
    assert sum(m["works"] for m in shown) == sum(
        1 for (_, evicting), works in offer.snap.works_by_job.items() if not evicting
        for _ in works)


def test_queues_list_waiting_jobs_in_order_with_reasons(hub: Scheduler) -> None:
    offer, report = latest(hub)
    shown = pages.queues(offer.snap, report, offer.now)
    assert shown["tree"] == "kube-system/scale"
    leaves = [q for q in shown["queues"] if q["leaf"]]
    assert leaves
    assert all(q["depth"] == 1 for q in leaves)
    for leaf in leaves:
        key = "/".join(leaf["path"])
        assert [w["job"].split("/")[1] for w in leaf["waiting"]] == \
            [k.rsplit("/", 1)[1] for k in report.pending.get(key, ())]
        assert [w["position"] for w in leaf["waiting"]] == \
            list(range(1, len(leaf["waiting"]) + 1))
        assert all(w["reason"] and w["uid"] for w in leaf["waiting"])
    root = shown["queues"][0]
    assert root["waitingCount"] == sum(q["waitingCount"] for q in leaves)
    assert root["gpus"]["used"] == sum(q["gpus"]["used"] for q in leaves)


def test_jobs_filter_and_bound_the_list(hub: Scheduler) -> None:
    offer, _ = latest(hub)
    every = pages.jobs(offer.snap)
    assert every["total"] == every["shown"] == 40
    assert sum(every["states"].values()) == 40
    assert "Queuing" in every["states"]
    waiting = pages.jobs(offer.snap, state="Queuing")
    assert 0 < waiting["total"] < 40
    assert all(j["position"] for j in waiting["jobs"])
    assert pages.jobs(offer.snap, text="tenant-b")["total"] == \
        sum(1 for j in every["jobs"] if j["namespace"] == "tenant-b")
    few = pages.jobs(offer.snap, limit=5)
    assert few["shown"] == 5
    assert few["total"] == 40
    assert pages.jobs(offer.snap, limit=10**9)["shown"] <= pages.MAX_JOBS_SHOWN


def test_a_bound_jobs_gang_and_timeline(hub: Scheduler) -> None:
    offer, _ = latest(hub)
    (uid, _), works = next(iter(offer.snap.works_by_job.items()))
    event = {"reason": "Bound", "message": "placed", "count": 2,
             "lastTimestamp": "2030-01-01T00:00:00Z"}
    detail = pages.job(offer.snap, uid, [event])
    assert detail is not None
    assert [s["cluster"] for s in detail["shares"]] == sorted(
        w["spec"]["placement"]["cluster"] for w in works)
    whats = [m["what"] for m in detail["timeline"]]
    assert whats[0] == "Created"
    assert whats[-1] == "Bound"
    assert "Admitted" in whats
    assert detail["timeline"][-1]["detail"] == "placed (×2)"
    assert pages.job(offer.snap, "no-such-uid") is None


def test_a_moved_jobs_timeline_says_why() -> None:
    job = {"metadata": {"creationTimestamp": "2030-01-01T00:00:00Z", "annotations": {
        REQUEUED_AT: "2030-01-01T00:05:00Z", REQUEUE: "Preempted",
        PREEMPTED_BY: "team-a/urgent", FAILOVER_SINCE: "2030-01-01T00:03:00.000000Z",
        FAILOVER_AVOID: "member2"}}}
    moments = [(m["what"], m["detail"]) for m in pages.timeline(job, [], [])]
    assert moments == [("Created", ""), ("FailingOver", "away from member2"),
                       ("Requeued", "Preempted (preempted by team-a/urgent)")]


def test_history_is_bounded_and_starts_again() -> None:
    history = History(step=10, window=30)
    queue: Any = {"name": "a", "gpus": {"used": 3}, "waitingCount": 2}
    for minute in range(10):
        history.add(datetime(2030, 1, 1, 0, minute, tzinfo=UTC), [queue])
    read = history.read()
    assert read["capacity"] == 3
    assert len(read["samples"]) == 3
    assert read["since"] == "2030-01-01T00:07:00Z"
    assert read["samples"][-1]["used"] == {"a": 3}
    history.clear()
    assert history.read()["samples"] == []
    assert history.read()["since"] == ""


def test_an_hour_of_history_stays_small() -> None:
    history = History()
    queues: Any = [{"name": f"root-team-{i}", "gpus": {"used": 1000 + i}, "waitingCount": 300}
                   for i in range(200)]
    tracemalloc.start()
    for second in range(0, 7200, 10):  # two hours: the first goes
        history.add(datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=second), queues)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    read = history.read()
    assert len(read["samples"]) == 360
    assert len(read["samples"][0]["used"]) == MAX_QUEUES
    assert size < 2 * 2**20, size


class Switch:
    def __init__(self) -> None:
        self.on = True


def board_of(hub: Scheduler, leading: Switch, events: list[str] | None = None) -> Board:
    def read_events(namespace: str, uid: str) -> list[dict[str, Any]]:
        (events if events is not None else []).append(uid)
        return []

    return Board(hub.reporting.latest,
                 Leader(leading=lambda: leading.on, identity=lambda: "hub-a",
                        term=lambda: "uid:1", holder=lambda: "hub-b"), read_events)


def test_board_answers_only_while_leading_and_computes_once_per_pass(hub: Scheduler) -> None:
    leading, asked = Switch(), []
    board = board_of(hub, leading, asked)
    offer, _ = latest(hub)
    uid = next(iter(offer.snap.works_by_job))[0]
    status, body = board.view(f"/api/jobs/{uid}")
    assert status == 200
    assert json.loads(body)["job"]["uid"] == uid
    assert board.view(f"/api/jobs/{uid}") == (200, body)
    assert asked == [uid]
    status, body = board.view("/api/overview")
    overview = json.loads(body)
    assert overview["members"] == 3
    assert overview["identity"] == "hub-a"
    assert board.view("/api/nothing")[0] == 404
    assert board.view("/api/jobs/no-such-uid")[0] == 404
    leading.on = False
    status, body = board.view("/api/overview")
    assert status == 503
    assert json.loads(body)["leader"] == "hub-b"


def test_board_history_follows_leadership(hub: Scheduler) -> None:
    leading = Switch()
    board = board_of(hub, leading)
    board.sample()
    board.sample()
    assert len(board.history.read()["samples"]) == 2
    leading.on = False
    board.sample()
    assert board.history.read()["samples"] == []


@pytest.fixture
def server(hub: Scheduler) -> Iterator[int]:
    running = serve(board_of(hub, Switch()), 0)
    yield running.server_address[1]
    running.shutdown()
    running.server_close()


def get(port: int, path: str, host: str = "127.0.0.1", method: str = "GET"
        ) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, headers={"Host": f"{host}:{port}"})
    return connection.getresponse()


def test_server_serves_the_page_and_its_views_read_only(server: int) -> None:
    page = get(server, "/")
    assert page.status == 200
    assert b'<script src="/app.js"' in page.read()
    assert "default-src 'self'" in page.getheader("Content-Security-Policy", "")
    assert get(server, "/app.js").status == 200
    assert get(server, "/app.css").status == 200
    members = get(server, "/api/members", host="localhost")
    assert members.status == 200
    assert len(json.loads(members.read())["members"]) == 3
    assert get(server, "/api/queues", host="[::1]").status == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert get(server, "/api/members", method=method).status == 501
    assert get(server, "/nothing").status == 404


def test_server_refuses_names_other_than_loopback(server: int) -> None:
    answer = get(server, "/api/members", host="attacker.example")
    assert answer.status == 403
    assert b"loopback" in answer.read()


def test_the_leader_says_where_its_page_is(monkeypatch: pytest.MonkeyPatch) -> None:
    assert whereabouts("127.0.0.1", 0) == {}
    monkeypatch.delenv("POD_NAME", raising=False)
    assert whereabouts("127.0.0.1", 8095) == {HUB_DASHBOARD: "127.0.0.1:8095"}
    monkeypatch.setenv("POD_NAME", "fleet-hub-1")
    monkeypatch.setenv("POD_NAMESPACE", "fleet-system")
    assert whereabouts("127.0.0.1", 8095)[HUB_POD] == "fleet-system/fleet-hub-1"


class LeaseHub:
    def __init__(self, annotations: dict[str, str], holder: str = "hub-1-abc123") -> None:
        self.lease = {"metadata": {"annotations": annotations},
                      "spec": {"holderIdentity": holder}}
        self.forwarded: list[tuple[str, str, int]] = []
        self.target = 0

    def get(self, resource: object, name: str, namespace: str) -> dict[str, Any]:
        return self.lease

    def port_forward(self, pod: str, namespace: str, port: int) -> Any:
        self.forwarded.append((namespace, pod, port))
        return Forward(socket.create_connection(("127.0.0.1", self.target)))


class Forward:
    def __init__(self, end: socket.socket) -> None:
        self.end = end

    def socket(self, port: int) -> socket.socket:
        return self.end

    def close(self) -> None:
        self.end.close()


def test_cli_reads_the_leaders_page_from_its_lease() -> None:
    where = cli.leader_page(LeaseHub({HUB_DASHBOARD: "127.0.0.1:8095",
                                      HUB_POD: "fleet-system/fleet-hub-1"}))  # type: ignore[arg-type]
    assert where == cli.Whereabouts("hub-1-abc123", "127.0.0.1", 8095,
                                    ("fleet-system", "fleet-hub-1"))
    with pytest.raises(CliError, match="serves no dashboard"):
        cli.leader_page(LeaseHub({}))  # type: ignore[arg-type]
    with pytest.raises(CliError, match="no hub leads"):
        cli.leader_page(LeaseHub({HUB_DASHBOARD: "127.0.0.1:8095"}, holder=""))  # type: ignore[arg-type]


def test_cli_forwards_each_connection_to_the_leading_pod(server: int) -> None:
    hub = LeaseHub({HUB_DASHBOARD: f"127.0.0.1:{server}", HUB_POD: "fleet-system/fleet-hub-1"})
    hub.target = server  # the "Pod's" port: the test's own dashboard server
    forwarder = cli.Forwarder(hub, "127.0.0.1", 0)  # type: ignore[arg-type]
    stop = threading.Event()
    threading.Thread(target=forwarder.serve, args=(stop,), daemon=True).start()
    try:
        for _ in range(2):
            answer = get(forwarder.port, "/api/overview")
            assert answer.status == 200
            assert json.loads(answer.read())["members"] == 3
        assert hub.forwarded == [("fleet-system", "fleet-hub-1", server)] * 2
    finally:
        stop.set()
