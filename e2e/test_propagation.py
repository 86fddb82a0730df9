"""Gang division, propagation and failover on a hub with three members.

member1 and member2 have 4 nodes x 8 GPUs; member3 is fragmented (4 nodes x 1 GPU), so that
summed-free mode and node-aware mode disagree about it.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.chaos import faults
from e2e.chaos.ledger import Ledger, Limits
from e2e.conftest import eventually, forbidden_lines
from e2e.jobs import seed_pytorchjob, state
from e2e.localfleet import HUB, LocalFleet
from e2e.localfleet.demo import binding_event
from e2e.localfleet.nodes import NodeShape
from fleet.api.protocol import CLUSTERS
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]


@pytest.fixture(scope="module")
def fleet3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFleet]:
    """Three members with their own shapes. The hub and agents are host processes: the
    two-hub race runs a second hub and SIGSTOPs the leader directly."""
    workdir = Path(tmp_path_factory.mktemp("fleet3"))
    local = LocalFleet(workdir, members={
        "member1": [NodeShape(4, 8)], "member2": [NodeShape(4, 8)],
        "member3": [NodeShape(4, 1, model="NVIDIA-T4")],
    }, say=lambda m: print(f"[fleet3] {m}", flush=True), nodes="host")
    try:
        local.up()
        eventually(lambda: len([c for c in local.client(HUB).list(r.MEMBERCLUSTERS)[0]
                                if (c.get("status") or {}).get("capacity")]) == 3,
                   what="three members reporting capacity")
        yield local
    finally:
        local.down()
    assert forbidden_lines(workdir / "logs") == []


def policy(namespace: str, *, split: int = 1, toleration: int | None = None,
           purge: str = "Immediately") -> Body:
    spec: Body = {
        "resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
        "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided",
                                            "customSchedulingType": "Gang"}},
    }
    if split > 1:
        spec["placement"]["spreadConstraints"] = [{"spreadByField": "cluster",
                                                   "maxGroups": split}]
    if toleration is not None:
        spec["failover"] = {"application": {"decisionConditions": {
            "tolerationSeconds": toleration}, "purgeMode": purge}}
    return {"apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "gang", "namespace": namespace}, "spec": spec}


def setup_namespace(hub: Kube, namespace: str, **kwargs: Any) -> None:
    if hub.get_or_none(r.NAMESPACES, namespace) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace}})
    hub.apply(r.PROPAGATIONPOLICIES, policy(namespace, **kwargs), field_manager="test")


RESULT = re.compile(r"\{(member\d):0,\[([^\]]*)\]\}")


def placement(hub: Kube, job: Body) -> dict[str, str]:
    message = eventually(lambda: binding_event(hub, job), what="a binding event")
    return dict(RESULT.findall(message))


def wait_state(hub: Kube, name: str, namespace: str, wanted: str,
               timeout: float = 60) -> Body:
    def check() -> Body | None:
        job = hub.get(r.PYTORCHJOBS, name, namespace)
        return job if state(job) == wanted else None
    return eventually(check, timeout=timeout, what=f"{namespace}/{name} {wanted}")


def env_of(pod: Body) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_a_gang_too_big_for_one_member_runs_split_across_two(fleet3: LocalFleet) -> None:
    hub = fleet3.client(HUB)
    setup_namespace(hub, "split", split=2)
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("big", "split", run_for="4s", gpus=8,
                                                    workers=4))  # 5 x 8 GPUs > 32 per member
    shares = placement(hub, job)
    assert shares == {"member1": "{master 1} {worker 3}", "member2": "{worker 1}"}

    ranks: dict[str, str] = {}
    pods_by_cluster: dict[str, list[Body]] = {}
    for cluster, expected_pods in (("member1", 4), ("member2", 1)):
        member = fleet3.client(cluster)

        def pods(m: Kube = member, n: int = expected_pods) -> list[Body] | None:
            found, _ = m.list(r.PODS, "split", label_selector="training.kubeflow.org/job-name=big")
            bound = [p for p in found if p["spec"].get("nodeName")]
            return bound if len(bound) == n else None

        pods_by_cluster[cluster] = eventually(pods, what=f"pods on {cluster}")
        for pod in pods_by_cluster[cluster]:
            env = env_of(pod)
            ranks[pod["metadata"]["name"]] = env["RANK"]
            assert env["WORLD_SIZE"] == "5"
            world = json.loads(env["FLEET_WORLD"])
            assert [(s["cluster"], s["replicas"]) for s in world] == [
                ("member1", {"Master": 1, "Worker": 3}), ("member2", {"Worker": 1})]
    # The master's member serves it behind a headless Service that selects the master pod on
    # the port every replica is told. Peers in that cluster reach it by the Service's name;
    # the worker on member2 is told the Multi-Cluster Services name of that same Service
    # (<svc>.<ns>.svc.clusterset.local). Exporting it and resolving that name across clusters
    # is the MCS implementation's job, which the user provides (see README); nothing here
    # makes it resolvable, so only the consistency of the names is checked.
    (master,) = [p for p in pods_by_cluster["member1"] if p["metadata"]["name"] == "big-master-0"]
    service = fleet3.client("member1").get(r.SERVICES, "big-master-0", "split")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= master["metadata"]["labels"].items()
    assert [p["port"] for p in service["spec"]["ports"]] == [int(env_of(master)["MASTER_PORT"])]
    local_name = service["metadata"]["name"]
    clusterset_name = f"{local_name}.{service['metadata']['namespace']}.svc.clusterset.local"
    for cluster, told in (("member1", local_name), ("member2", clusterset_name)):
        for pod in pods_by_cluster[cluster]:
            env = env_of(pod)
            assert (env["MASTER_ADDR"], env["PET_MASTER_ADDR"]) == (told, told), cluster
            assert env["MASTER_PORT"] == env_of(master)["MASTER_PORT"]
    assert fleet3.client("member2").get_or_none(r.SERVICES, "big-master-0", "split") is None
    assert ranks == {"big-master-0": "0", "big-worker-0": "1", "big-worker-1": "2",
                     "big-worker-2": "3", "big-worker-3": "4"}
    done = wait_state(hub, "big", "split", "Succeeded")
    assert done["status"]["clusters"] == ["member1", "member2"]
    assert done["status"]["replicaStatuses"]["Worker"] == {"succeeded": 4}


def test_a_new_policy_re_evaluates_jobs_not_yet_bound(fleet3: LocalFleet) -> None:
    hub = fleet3.client(HUB)
    hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": "late-policy"}}, field_manager="test")
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("early", "late-policy", run_for="1s"))
    eventually(lambda: (hub.get(r.PYTORCHJOBS, "early", "late-policy").get("status") or {}
                        ).get("queue", {}).get("reason") == "NoMatchingPolicy",
               what="the job waiting for a policy")
    hub.apply(r.PROPAGATIONPOLICIES, policy("late-policy"), field_manager="test")
    assert placement(hub, job)
    # Its GPUs must be free again before the next test measures what members have left.
    wait_state(hub, "early", "late-policy", "Succeeded")
    hub.delete(r.PYTORCHJOBS, "early", "late-policy")


def test_kubectl_fleet_shows_every_member_share(fleet3: LocalFleet) -> None:
    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "fleet.cli", "--kubeconfig",
                               str(fleet3.kubeconfig(HUB)), *args], check=True,
                              capture_output=True, text=True).stdout

    jobs = cli("get", "pytorchjob", "-M", "-n", "split").splitlines()
    assert jobs[0].split() == ["NAME", "CLUSTER", "STATE", "AGE", "ADOPTION"]
    assert [line.split()[:3] + line.split()[-1:] for line in jobs[1:]] == [
        ["big", "member1", "Succeeded", "Y"], ["big", "member2", "Succeeded", "Y"]]
    pods = cli("get", "pod", "-M", "-n", "split").splitlines()
    assert pods[0].split() == ["NAME", "CLUSTER", "READY", "STATUS", "RESTARTS", "AGE"]
    assert {tuple(line.split()[:2]) for line in pods[1:]} >= {("big-master-0", "member1"),
                                                               ("big-worker-3", "member2")}


def test_the_gpu_model_a_pod_asks_for_decides_the_member(fleet3: LocalFleet) -> None:
    """A nodeSelector on the GPU model (a label every agent reports): the 2-GPU job asking
    for A100s would fit member3's T4 nodes most tightly, but goes where A100s are; one
    asking for T4s goes to member3; one asking for a model nobody has waits, saying so."""
    hub = fleet3.client(HUB)
    setup_namespace(hub, "models")

    def asking(name: str, model: str) -> Body:
        job = seed_pytorchjob(name, "models", gpus=1, workers=1, run_for="2s")
        for spec in job["spec"]["pytorchReplicaSpecs"].values():
            spec["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": model}
        return hub.create(r.PYTORCHJOBS, job)

    a100 = asking("a100", "NVIDIA-A100-SXM4-80GB")
    assert set(placement(hub, a100)) <= {"member1", "member2"}
    t4 = asking("t4", "NVIDIA-T4")
    assert set(placement(hub, t4)) == {"member3"}
    for name in ("a100", "t4"):
        wait_state(hub, name, "models", "Succeeded")
    asking("h100", "NVIDIA-H100")

    def reason() -> str | None:
        message = str((hub.get(r.PYTORCHJOBS, "h100", "models").get("status") or {}
                       ).get("queue", {}).get("message", ""))
        return message or None

    said = eventually(reason, what="h100's reason")
    assert "member3: no node with nvidia.com/gpu.product in [NVIDIA-H100]" in said
    for name in ("a100", "t4", "h100"):
        hub.delete(r.PYTORCHJOBS, name, "models")


def test_fragmentation_node_aware_places_where_summed_mode_strands(fleet3: LocalFleet) -> None:
    hub = fleet3.client(HUB)
    setup_namespace(hub, "frag")
    def two_by_two(name: str) -> Body:  # 2 workers of 2 GPUs each
        return seed_pytorchjob(name, "frag", gpus=2, workers=2, master=False, run_for="1h")

    aware = hub.create(r.PYTORCHJOBS, two_by_two("aware"))
    assert set(placement(hub, aware)) <= {"member1", "member2"}
    wait_state(hub, "aware", "frag", "Running")

    hub.create(r.PYTORCHJOBS, seed_pytorchjob("too-big", "frag", gpus=16, workers=1,
                                              master=False))
    def reason() -> str:  # read until member3 reports every earlier job's pods gone
        message = str((hub.get(r.PYTORCHJOBS, "too-big", "frag").get("status") or {}
                       ).get("queue", {}).get("message", ""))
        assert "member3: short of nvidia.com/gpu 12 in total" in message, message
        return message
    # (the earlier tests' pods on member3 go with its garbage collector, slower under load)
    reason_text = eventually(reason, timeout=180,
                             what="too-big's reason naming member3's 4 free GPUs")
    assert "member1: 1 of 1 replicas find no node with room" in reason_text
    assert state(hub.get(r.PYTORCHJOBS, "too-big", "frag")) == "Queuing"
    hub.delete(r.PYTORCHJOBS, "too-big", "frag")

    fleet3.stop_process("hub")
    fleet3.hub_args = ["--fit-mode", "Summed"]
    fleet3.start_hub()
    try:
        summed = hub.create(r.PYTORCHJOBS, two_by_two("summed"))
        assert placement(hub, summed) == {"member3": "{worker 2}"}
        member3 = fleet3.client("member3")

        def stranded() -> list[Body] | None:
            pods, _ = member3.list(r.PODS, "frag",
                                   label_selector="training.kubeflow.org/job-name=summed")
            unschedulable = [p for p in pods for c in (p.get("status") or {}).get(
                "conditions") or [] if c.get("reason") == "Unschedulable"]
            return unschedulable or None

        assert eventually(stranded, what="summed mode's gang stranded on member3")
    finally:
        fleet3.stop_process("hub")
        fleet3.hub_args = []
        fleet3.start_hub()
    for name in ("aware", "summed"):
        hub.delete(r.PYTORCHJOBS, name, "frag")


def submit(hub: Kube, job: Body, attempts: int = 10) -> None:
    """Create ``job`` as a client that retries would: the job webhook fails closed, and the
    API server's call to a frozen hub replica times out."""
    for attempt in range(attempts):
        try:
            hub.create(r.PYTORCHJOBS, job)
            return
        except errors.AlreadyExists:
            return  # a create whose answer was lost
        except errors.ApiError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


@contextlib.contextmanager
def flipping_lease(hub: Kube, every: float = 1.5) -> Iterator[None]:
    """Delete the hub Lease every ``every`` seconds: a standby that renews first creates it and
    leads while the old leader still leads until its own next renewal."""
    stop = threading.Event()

    def flip() -> None:
        while not stop.wait(every):
            hub.delete(r.LEASES, "fleet-hub", "fleet-system")

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        yield
    finally:
        stop.set()
        flipper.join()


def test_two_hubs_never_bind_a_job_twice(fleet3: LocalFleet) -> None:
    """Two hubs race. First the Lease is deleted again and again during a burst of big jobs:
    the standby creates it and leads at once while the old leader leads on until its next
    renewal, so both decide on the same pending jobs, each from its own view of what is
    assumed bound where. Then the leader is frozen mid-burst past its lease, the other takes
    over, and the frozen one is thawed and carries on from its stale view until it notices.
    The ledger watches throughout: every job has one placement, Works only where it is
    placed, and ends."""
    hub = fleet3.client(HUB)
    setup_namespace(hub, "race")
    fleet3.start_hub("hub-2")
    try:
        with Ledger(fleet3, ("race",), Limits(settle=3)) as ledger:
            expected = {}
            def burst(prefix: str, count: int, gpus: int = 1) -> None:
                for i in range(count):
                    name = f"{prefix}-{i}"
                    submit(hub, seed_pytorchjob(name, "race", run_for="2s", workers=1,
                                                gpus=gpus))
                    expected[f"race/{name}"] = "Succeeded"
                    time.sleep(0.05)

            burst("warm", 4)  # both hubs have started and one leads
            eventually(lambda: faults.hub_leader(fleet3, ("hub", "hub-2")), what="a leader")
            with flipping_lease(hub):  # 16-GPU gangs, two to a member: they are bound as
                # others end, each time by whichever hubs lead then
                burst("flip", 24, gpus=8)
                eventually(lambda: all(
                    CLUSTERS in (j["metadata"].get("annotations") or {})
                    for j in hub.list(r.PYTORCHJOBS, "race")[0]), timeout=180,
                    what="every job bound while the lease flips")
            leader = eventually(lambda: faults.hub_leader(fleet3, ("hub", "hub-2")),
                                what="a leading hub")
            thread = threading.Thread(target=burst, args=("race", 30))
            thread.start()
            time.sleep(0.5)  # the leader is deciding the burst
            faults.signal_process(fleet3, leader, signal.SIGSTOP)
            thread.join()
            time.sleep(13)  # past the 10s lease: the other hub takes over and binds
            faults.signal_process(fleet3, leader, signal.SIGCONT)
            burst("after", 10)  # the thawed leader still thinks it leads for a moment
            other = "hub-2" if leader == "hub" else "hub"
            assert faults.hub_leader(fleet3, ("hub", "hub-2")) in (leader, other)
            ledger.await_ends(expected, timeout=180)
            ledger.requeues_recorded(hub)
            for job in hub.list(r.PYTORCHJOBS, "race")[0]:
                annotations = job["metadata"]["annotations"]
                clusters = sorted(annotations[CLUSTERS].split(","))
                works = sorted(w["spec"]["placement"]["cluster"] for w in hub.list(r.WORKS)[0]
                               if w["spec"]["job"]["uid"] == job["metadata"]["uid"])
                assert works == clusters, (job["metadata"]["name"], works, clusters)
        assert not ledger.summary(), "\n".join(map(str, ledger.summary()))
        assert ledger.samples > 20
    finally:
        fleet3.stop_process("hub-2")
        fleet3.stop_process("hub")
        fleet3.start_hub()


def test_propagate_deps_sends_referenced_objects_and_removes_them_with_the_job(
        fleet3: LocalFleet) -> None:
    hub = fleet3.client(HUB)
    setup_namespace(hub, "deps")
    hub.apply(r.PROPAGATIONPOLICIES, {**policy("deps"), "spec": {
        **policy("deps")["spec"], "propagateDeps": True}}, field_manager="test")
    hub.create(r.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "settings", "namespace": "deps"},
                              "data": {"lr": "0.01"}})
    hub.create(r.SECRETS, {"apiVersion": "v1", "kind": "Secret",
                           "metadata": {"name": "token", "namespace": "deps"},
                           "stringData": {"key": "s3cr3t"}})
    job = seed_pytorchjob("with-deps", "deps", run_for="1h", workers=1)
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        pod["containers"][0]["envFrom"] = [{"configMapRef": {"name": "settings"}}]
        pod["containers"][0]["env"] = [{"name": "T", "valueFrom": {"secretKeyRef": {
            "name": "token", "key": "key"}}}, {"name": "X", "valueFrom": {"configMapKeyRef": {
                "name": "absent", "key": "k"}}}]
    created = hub.create(r.PYTORCHJOBS, job)
    (cluster,) = placement(hub, created)
    member = fleet3.client(cluster)
    settings = eventually(lambda: member.get_or_none(r.CONFIGMAPS, "settings", "deps"),
                          what="the ConfigMap on the member")
    assert settings["data"] == {"lr": "0.01"}
    token = eventually(lambda: member.get_or_none(r.SECRETS, "token", "deps"),
                       what="the Secret on the member")
    assert token["data"]["key"] == "czNjcjN0"
    events, _ = hub.list(r.EVENTS, "deps")
    missing = [e["message"] for e in events if e.get("reason") == "DependencyMissing"]
    assert missing == ["propagateDeps: not found on the hub, not propagated: ConfigMap absent"]
    hub.delete(r.PYTORCHJOBS, "with-deps", "deps")
    eventually(lambda: member.get_or_none(r.CONFIGMAPS, "settings", "deps") is None,
               what="the ConfigMap removed with the job")
    # the agent deletes a Work's objects one after another: the Secret may follow a moment later
    eventually(lambda: member.get_or_none(r.SECRETS, "token", "deps") is None,
               what="the Secret removed with the job")


def test_stopping_a_member_api_server_moves_its_jobs(fleet3: LocalFleet) -> None:
    hub = fleet3.client(HUB)
    setup_namespace(hub, "failover", toleration=5)
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("survivor", "failover", run_for="1h"))
    first = placement(hub, job)
    (lost,) = first
    wait_state(hub, "survivor", "failover", "Running")

    fleet3.kill_component(lost, "kube-apiserver")
    killed = time.monotonic()

    def moved() -> str | None:
        events, _ = hub.list(r.EVENTS, "failover",
                             field_selector=f"involvedObject.uid={job['metadata']['uid']}")
        clusters = [c for e in events if e.get("reason") == "ScheduleBindingSucceed"
                    for c in RESULT.findall(str(e.get("message")))]
        return next((c[0] for c in clusters if c[0] != lost), None)

    target = eventually(moved, timeout=90, what="the job bound to another member")
    elapsed = time.monotonic() - killed
    print(f"failover from {lost} to {target}: bound {elapsed:.1f}s after the API server died "
          f"(toleration 5s)")
    running = wait_state(hub, "survivor", "failover", "Running", timeout=60)
    assert running["status"]["clusters"] == [target]
    failed_over = [e for e in hub.list(r.EVENTS, "failover")[0] if e.get("reason") == "FailedOver"]
    assert failed_over
    assert f"{lost}: cluster lost" in failed_over[0]["message"]
