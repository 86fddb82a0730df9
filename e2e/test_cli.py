"""``kubectl fleet`` against the local fleet: a queued job and a running one under seed 002's
quota tree (max one job at a time in ``root-child-2``), read with every command and format."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import eventually
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.demo import EXAMPLES, apply_file
from fleet.cli.main import main
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
QUEUE = "root-child-2"


def merged_kubeconfig(fleet: LocalFleet, path: Path, current: str) -> Path:
    """One kubeconfig with a context per cluster, named like it (how ``logs`` finds
    members), whose current context is ``current``."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [],
                              "users": [], "contexts": [], "current-context": current}
    for cluster in fleet.clusters:
        config = yaml.safe_load(fleet.kubeconfig(cluster).read_text())
        context = next(c for c in config["contexts"]
                       if c["name"] == config["current-context"])["context"]
        server = next(c for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u for u in config["users"] if u["name"] == context["user"])
        merged["clusters"].append({"name": cluster, "cluster": server["cluster"]})
        merged["users"].append({"name": cluster, "user": user["user"]})
        merged["contexts"].append({"name": cluster, "context": {"cluster": cluster,
                                                                "user": cluster}})
    path.write_text(yaml.safe_dump(merged))
    return path


class Cli:
    def __init__(self, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.kubeconfig, self.capsys = kubeconfig, capsys

    def __call__(self, *argv: str, code: int = 0) -> str:
        self.capsys.readouterr()
        got = main([*argv, "--kubeconfig", str(self.kubeconfig)])
        captured = self.capsys.readouterr()
        assert got == code, captured.err
        if code:
            assert captured.err.count("\n") == 1, captured.err
            assert captured.err.startswith("error: ")
            return captured.err
        assert captured.err == ""
        return captured.out


@pytest.fixture(scope="module")
def jobs(fleet: LocalFleet, hub: Kube,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``cli-run`` running and ``cli-wait`` waiting behind it in the queue; yields a merged
    kubeconfig whose current context is member1 (so that commands must use --context hub)."""
    apply_file(hub, EXAMPLES / "elasticquotatree.yaml")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang-queue.yaml")
    eventually(lambda: (hub.get_or_none(r.QUEUES, QUEUE, "kube-queue") or {}).get("status"),
               what=f"Queue {QUEUE}")
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("cli-run", run_for="1h"))
    eventually(lambda: state(hub.get(r.PYTORCHJOBS, "cli-run", "default")) == "Running",
               timeout=90, what="cli-run Running")
    hub.create(r.PYTORCHJOBS, seed_pytorchjob("cli-wait", run_for="1s"))
    eventually(lambda: ((hub.get(r.PYTORCHJOBS, "cli-wait", "default").get("status") or {})
                        .get("queue") or {}).get("position") == 1, what="cli-wait queued")
    eventually(lambda: ((hub.get_or_none(r.QUEUES, QUEUE, "kube-queue") or {}).get("status")
                        or {}).get("pendingJobs") == ["default/cli-wait"],
               what=f"Queue {QUEUE} listing cli-wait")  # (published after the job's status)
    yield merged_kubeconfig(fleet, tmp_path_factory.mktemp("cli") / "kubeconfig", "member1")
    for name in ("cli-run", "cli-wait"):
        hub.delete(r.PYTORCHJOBS, name, "default")
    # Only its own: the suite's shared fleet may hold other tests' jobs in default.
    eventually(lambda: not {"cli-run", "cli-wait"} & {
        j["metadata"]["name"] for j in hub.list(r.PYTORCHJOBS, "default")[0]},
        what="jobs gone")
    hub.delete(r.ELASTICQUOTATREES, "elasticquotatree", "kube-system")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")


@pytest.fixture
def cli(jobs: Path, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(jobs, capsys)


def rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_get_lists_running_and_queued_jobs(cli: Cli) -> None:
    table = {row[0]: row for row in rows(cli("--context", HUB, "get", "ptj"))[1:]}
    assert table["cli-run"][1] == "Running"
    assert table["cli-run"][2].startswith("member")
    assert table["cli-wait"][2:4] == ["<none>", f"{QUEUE}#1"]
    multi = rows(cli("get", "pytorchjob", "-M", "--context", HUB, "-o", "wide"))
    assert multi[0] == ["NAME", "CLUSTER", "STATE", "AGE", "ADOPTION", "REPLICAS"]
    assert next(r for r in multi if r[0] == "cli-wait")[:2] == ["cli-wait", "<none>"]
    everywhere = rows(cli("--context", HUB, "get", "ptj", "-A"))
    assert everywhere[0][0] == "NAMESPACE"
    assert ["default", "cli-run"] in [row[:2] for row in everywhere]


def test_context_namespace_and_selector(cli: Cli) -> None:
    # The merged kubeconfig's current context is member1, where no member is registered.
    assert cli("get", "clusters").strip() == "No resources found."
    assert "member1" in cli("get", "clusters", "--context", HUB)
    assert cli("--context", HUB, "get", "ptj", "-n", "elsewhere").strip() == "No resources found."
    assert cli("--context", HUB, "get", "ptj", "-l", "no-such=label").strip() == \
        "No resources found."
    assert "error: context 'nope' not found" in cli("--context", "nope", "get", "ptj", code=1)


def test_machine_formats(cli: Cli) -> None:
    listed = json.loads(cli("--context", HUB, "get", "ptj", "-o", "json"))
    assert {i["metadata"]["name"] for i in listed["items"]} >= {"cli-run", "cli-wait"}
    one = yaml.safe_load(cli("--context", HUB, "get", "ptj", "cli-run", "-o", "yaml"))
    assert one["kind"] == "PyTorchJob"
    assert one["metadata"]["name"] == "cli-run"
    names = cli("--context", HUB, "get", "ptj", "-o", "name").split()
    assert [n for n in names if n.split("/")[1].startswith("cli-")] == [
        "pytorchjob.kubeflow.org/cli-run", "pytorchjob.kubeflow.org/cli-wait"]
    pods = json.loads(cli("--context", HUB, "get", "pod", "-M", "-o", "json"))["items"]
    assert {p["metadata"]["name"] for p in pods} >= {"cli-run-master-0", "cli-run-worker-0"}
    clusters = cli("--context", HUB, "get", "clusters", "-o", "name").split()
    assert clusters == ["membercluster.fleet.sh/member1", "membercluster.fleet.sh/member2"]


def test_get_queue_shows_waiting_jobs_in_order(cli: Cli) -> None:
    text = cli("--context", HUB, "get", "queue")
    assert ["QUEUE", "POSITION", "JOB"] in rows(text)
    assert [QUEUE, "1", "default/cli-wait"] in rows(text)
    table = {row[0]: row for row in rows(text.split("\n\n")[0])[1:]}
    assert table[QUEUE][1:3] == ["1", "1"]  # one pending, one admitted
    wide = rows(cli("--context", HUB, "get", "queue", QUEUE, "-o", "wide"))
    assert wide[0][-3:] == ["PATH", "MIN", "CELLS"]
    assert wide[1][-1] == "-"  # child-2 guarantees no GPUs: it owns no cells
    single = rows(cli("--context", HUB, "get", "queue", QUEUE))
    assert [QUEUE, "1", "default/cli-wait"] in single
    assert "not found" in cli("--context", HUB, "get", "queue", "nope", code=1)


def test_why_and_describe(cli: Cli) -> None:
    waiting = cli("--context", HUB, "why", "cli-wait")
    assert waiting.startswith(f"pytorchjob.kubeflow.org/cli-wait waits in queue {QUEUE} at "
                              "position 1")
    running = cli("--context", HUB, "why", "pytorchjob/cli-run")
    assert "is Running: placed on member" in running
    described = cli("--context", HUB, "describe", "pytorchjob", "cli-run")
    for part in ("Name:         cli-run", "Placement:", "Replicas:", "cli-run-worker-1",
                 "Conditions:", "Events:", "ScheduleBindingSucceed"):
        assert part in described
    assert "no job \"nope\"" in cli("--context", HUB, "why", "nope", code=1)


def test_top_clusters(cli: Cli) -> None:
    table = rows(cli("--context", HUB, "top", "clusters"))
    assert table[0] == ["NAME", "GPU(FREE/TOTAL)", "CPU(FREE/TOTAL)", "MEMORY(FREE/TOTAL)",
                        "NODES", "HEARTBEAT"]
    by_name = {row[0]: row for row in table[1:]}
    assert set(by_name) == {"member1", "member2"}
    free, total = (int(x) for x in by_name["member1"][1].split("/"))
    assert total == 32
    assert 0 <= free <= total
    assert by_name["member1"][5].endswith("s")


def test_logs_come_from_the_member(cli: Cli, fleet: LocalFleet) -> None:
    # kwok serves every pod's log on the members (e2e/localfleet/pod.log)
    assert "fleet: simulated training step 1" in cli("--context", HUB, "logs", "cli-run",
                                                     "-r", "worker-1")
    assert "no replica 'worker-7'" in cli("--context", HUB, "logs", "cli-run", "-r", "worker-7",
                                          code=1)
    # Without a context named like the member, and no --member-kubeconfig, it says what to do.
    alone = Cli(fleet.kubeconfig(HUB), cli.capsys)
    assert "pass --member-kubeconfig" in alone("logs", "cli-run", code=1)


def test_the_installed_plugin_fails_with_one_line(jobs: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "fleet.cli", "get", "ptj", "--bogus",
                           "--kubeconfig", str(jobs)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error: unrecognized arguments: --bogus (see 'kubectl fleet --help')"]


def test_queue_gauges_while_one_job_runs_and_one_waits(jobs: Path, fleet: LocalFleet) -> None:
    from e2e.test_metrics import scrape

    def gauges() -> dict[str, float] | None:
        _, samples = scrape(fleet.metrics_url("hub"))
        found = {s.name: s.value for s in samples if s.labels.get("queue") == QUEUE and
                 s.name.startswith("fleet_queue_")}
        found |= {f"used {s.labels['resource']}": s.value for s in samples
                  if s.name == "fleet_quota_used" and s.labels.get("queue") == QUEUE}
        return found if found.get("fleet_queue_running_jobs") == 1 else None

    seen = eventually(gauges, timeout=30, what="running gauge")
    assert seen["fleet_queue_pending_jobs"] == 1
    assert seen["fleet_queue_admitted_jobs"] == 1
    assert seen["used kube-queue/max-jobs"] == 1
    assert seen["used nvidia.com/gpu"] == 3
