"""The dashboard at the scale bench's size: each view's payload and the hub's time to serve
it, over HTTP from the hub's own server, computed afresh for each request (as after every
pass). No browser: what the hub spends is the question.

Baseline for the payload: the JSON of every job the hub caches, what a page that listed
jobs by reading them from the API server would fetch.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time

from e2e.bench.results import Result
from fleet.hub.dashboard.server import Board, Leader, serve
from fleet.hub.scheduler import Scheduler

REQUESTS = 5  # per view; the median is reported


def views(scheduler: Scheduler, scale: str) -> list[Result]:
    offer, _ = scheduler.reporting.latest()
    assert offer is not None, "no pass offered its view"
    board = Board(scheduler.reporting.latest,
                  Leader(leading=lambda: True, identity=lambda: "bench", term=lambda: "",
                         holder=lambda: "bench"),
                  lambda namespace, uid: [])
    for _ in range(3):
        board.sample()
    server = serve(board, 0)
    port = server.server_address[1]
    uid = next(iter(offer.snap.works_by_job))[0]
    everything = len(json.dumps(list(offer.snap.jobs.values()), separators=(",", ":")))
    results = []
    try:
        for name, path in (("overview", "/api/overview"), ("members", "/api/members"),
                           ("queues", "/api/queues"), ("jobs", "/api/jobs"),
                           ("a job", f"/api/jobs/{uid}"), ("history", "/api/history")):
            seconds, size = [], 0
            for _ in range(REQUESTS):
                board._views.clear()  # computed afresh, as after each pass
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                started = time.perf_counter()
                connection.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
                answer = connection.getresponse()
                body = answer.read()
                seconds.append(time.perf_counter() - started)
                assert answer.status == 200, (path, answer.status, body[:200])
                size = len(body)
                connection.close()
            results += [
                Result(f"dashboard {name} view, payload, {scale}", size / 1024, "KiB", "",
                       baseline=everything / 1024, baseline_name="every cached job's JSON"),
                Result(f"dashboard {name} view, time to serve, {scale}",
                       statistics.median(seconds) * 1000, "ms", "",
                       note=f"median of {REQUESTS} requests, each computed afresh from the "
                            "last pass's snapshot"),
            ]
    finally:
        server.shutdown()
        server.server_close()
    return results
