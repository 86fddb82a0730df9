"""The MPI kinds' pure reconcile: Kubeflow MPIJob (kubectl exec) and T9k MPIJob (sshd)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import yaml

from e2e.localfleet.demo import EXAMPLES
from fleet.kinds.t9k import T9K_MPI as T9K_MPI_ADAPTER
from member_agent.controllers import mpi
from member_agent.controllers.kubeflow_mpi import KUBEFLOW_MPI
from member_agent.controllers.t9k_mpi import T9K_MPI
from tests.unit.test_job_status import pod, run, true

Body = dict[str, Any]


def example(name: str, index: int = 0) -> Body:
    docs = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    job: Body = copy.deepcopy(docs[index])
    job["metadata"] = {"name": "job", "namespace": "ns", "uid": "u1"}
    return job


def by_kind(objects: Any) -> dict[str, Body]:
    return {body["kind"]: body for _, body in objects}


# -- Kubeflow MPIJob ---------------------------------------------------------------------

def test_kubeflow_launcher_waits_for_ready_workers() -> None:
    job = example("kubeflow-mpijob.yaml")
    decision, job = run(KUBEFLOW_MPI, job, [])
    assert [p["metadata"]["name"] for p in decision.create] == ["job-worker-0", "job-worker-1"]
    not_ready = [pod("Worker", 0), pod("Worker", 1, "Pending")]
    decision, _ = run(KUBEFLOW_MPI, job, not_ready)
    assert not decision.create
    decision, _ = run(KUBEFLOW_MPI, job, [pod("Worker", 0), pod("Worker", 1)])
    assert [p["metadata"]["name"] for p in decision.create] == ["job-launcher"]


def test_kubeflow_config_and_rbac() -> None:
    job = example("kubeflow-mpijob.yaml")
    decision, _ = run(KUBEFLOW_MPI, job, [pod("Worker", 0), pod("Worker", 1, "Pending")])
    objects = by_kind(decision.objects)
    data = objects["ConfigMap"]["data"]
    assert objects["ConfigMap"]["metadata"]["name"] == "job-config"
    assert data["hostfile"] == "job-worker-0 slots=1\njob-worker-1 slots=1\n"
    assert data["discover_hosts.sh"] == "#!/bin/sh\necho job-worker-0:1\n"
    # (the launcher execs into the workers' first container, by its name)
    assert "kubectl exec \"${POD_NAME}\" --container worker" in data["kubexec.sh"]
    rules = objects["Role"]["rules"]
    assert rules[1] == {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"],
                        "resourceNames": ["job-worker-0", "job-worker-1"]}
    assert objects["RoleBinding"]["subjects"][0]["name"] == "job-launcher"


def test_kubeflow_launcher_pod() -> None:
    job = example("kubeflow-mpijob.yaml")
    decision, _ = run(KUBEFLOW_MPI, job, [pod("Worker", 0), pod("Worker", 1)])
    launcher = decision.create[0]
    spec = launcher["spec"]
    assert spec["serviceAccountName"] == "job-launcher"
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["OMPI_MCA_plm_rsh_agent"] == "/etc/mpi/kubexec.sh"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["NVIDIA_VISIBLE_DEVICES"] == ""
    assert spec["initContainers"][-1]["name"] == "kubectl-delivery"
    assert {"name": "mpi-kubectl", "mountPath": "/opt/kube"} in spec["containers"][0][
        "volumeMounts"]
    assert launcher["metadata"]["labels"]["training.kubeflow.org/job-role"] == "master"


def test_kubeflow_launcher_decides_and_cleans_workers_only() -> None:
    job = example("kubeflow-mpijob.yaml")  # cleanPodPolicy: Running
    pods = [pod("Launcher", 0, "Succeeded"), pod("Worker", 0), pod("Worker", 1)]
    decision, done = run(KUBEFLOW_MPI, job, pods)
    assert "Succeeded" in true(done["status"])
    assert done["status"]["conditions"][-1]["reason"] == "MPIJobSucceeded"
    assert sorted(decision.delete) == ["job-worker-0", "job-worker-1"]
    decision, failed = run(KUBEFLOW_MPI, job, [pod("Launcher", 0, "Failed", 1), pod("Worker", 0),
                                                pod("Worker", 1)])
    assert "Restarting" in true(failed["status"])  # the launcher's default is OnFailure


# -- T9k MPIJob --------------------------------------------------------------------------

def test_t9k_workers_run_sshd_and_the_launcher_runs_mpirun() -> None:
    job = example("t9k-mpijob-random-walk.yaml")
    decision, job = run(T9K_MPI, job, [])
    workers = decision.create
    assert [p["metadata"]["name"] for p in workers] == [f"job-worker-{i}" for i in range(5)]
    container = workers[0]["spec"]["containers"][0]
    assert container["command"][:2] == ["/usr/sbin/sshd", "-De"]
    assert "args" not in container
    assert workers[0]["spec"]["subdomain"] == "job"
    assert {"name": "ssh-auth", "mountPath": "/root/.ssh"} in container["volumeMounts"]
    secret = next(v for v in workers[0]["spec"]["volumes"] if v["name"] == "ssh-auth")
    assert secret["secret"]["defaultMode"] == 0o600
    objects = by_kind(decision.objects)
    assert objects["ConfigMap"]["data"]["hostfile"] == "".join(
        f"job-worker-{i}.job.ns.svc slots=3\n" for i in range(5))
    assert objects["Service"]["spec"]["clusterIP"] == "None"
    ready = [pod("worker", i) for i in range(5)]
    decision, _ = run(T9K_MPI, job, ready)
    launcher = decision.create[0]
    main = launcher["spec"]["containers"][0]
    assert main["name"] == "mpi-launcher"
    assert main["command"] == [
        "/usr/local/bin/mpirun", "--hostfile", "/etc/mpi/hostfile", "--prefix", "/usr/local",
        "--mca", "btl", "^openib", "-N", "3", "--enable-recovery", "--max-restarts", "100",
        "--allow-run-as-root", "-bind-to", "none", "./random_walk", "20", "40", "2"]
    assert "resources" not in main
    env = {e["name"]: e["value"] for e in main["env"]}
    assert env["OMPI_MCA_plm_rsh_args"].startswith("-p 22 ")


def test_t9k_non_root_ssh() -> None:
    job = example("t9k-mpijob-random-walk.yaml")
    job["spec"]["ssh"]["sshAuthMountPath"] = "/home/mpiuser/.ssh"
    decision, _ = run(T9K_MPI, job, [])
    container = decision.create[0]["spec"]["containers"][0]
    assert "StrictModes=no" in container["command"]
    assert "HostKey=/home/mpiuser/.ssh/id_rsa" in container["command"]
    volume = next(v for v in decision.create[0]["spec"]["volumes"] if v["name"] == "ssh-auth")
    assert volume["secret"]["defaultMode"] == 0o644


def test_t9k_mpi_status_and_clean_up_workers() -> None:
    job = example("t9k-mpijob-random-walk.yaml")  # cleanUpWorkers: true
    launcher = replace(pod("launcher", 0, "Succeeded"), name="job-launcher")
    decision, done = run(T9K_MPI, job, [launcher, *[pod("worker", i) for i in range(5)]])
    status = done["status"]
    assert status["phase"] == "Succeeded"
    assert status["tasks"][0]["type"] == "launcher"
    assert status["tasks"][0]["status"][0]["name"] == "job-launcher"
    assert sorted(decision.delete) == [f"job-worker-{i}" for i in range(5)]
    _, failed = run(T9K_MPI, job, [pod("launcher", 0, "Failed", 1),
                                   *[pod("worker", i) for i in range(5)]])
    assert failed["status"]["phase"] == "Failed"
    assert "Completed" not in true(failed["status"])


def test_t9k_mpi_debug_defaults() -> None:
    job = example("t9k-mpijob-debug-pause.yaml")
    job["spec"]["runMode"]["debug"]["replicaSpecs"] = []
    decision, job = run(T9K_MPI, job, [])
    assert decision.create[0]["spec"]["containers"][0]["command"] == ["/usr/bin/sshd", "-D"]
    decision, _ = run(T9K_MPI, job, [pod("worker", 0, variant="debug"),
                                     pod("worker", 1, variant="debug")])
    assert decision.create[0]["spec"]["containers"][0]["command"] == ["sleep", "inf"]


def test_horovod_example_gets_nccl_debug_and_mca() -> None:
    job = example("t9k-mpijob-horovod.yaml")
    _, job = run(T9K_MPI, job, [])
    decision, _ = run(T9K_MPI, job, [pod("worker", 0), pod("worker", 1)])
    main = decision.create[0]["spec"]["containers"][0]
    assert {"name": "NCCL_DEBUG", "value": "INFO"} in main["env"]
    command = main["command"]
    said = {tuple(command[i + 1:i + 3]) for i, word in enumerate(command) if word == "--mca"}
    assert {("btl", "^openib"), ("pml", "ob1")} <= said


def test_slots_and_hostfile_helpers() -> None:
    assert mpi.slots_from(["-N", "3"]) == 3
    assert mpi.slots_from(["--npernode", "2", "-x", "A"]) == 2
    assert mpi.slots_from([]) == 1
    assert mpi.hostfile(["a", "b"], 2) == "a slots=2\nb slots=2\n"


def test_t9k_split_share_runs_the_launcher_only_with_worker_zero() -> None:
    job = example("t9k-mpijob-random-walk.yaml")
    world = '[{"cluster":"a","replicas":{"worker":3}},{"cluster":"b","replicas":{"worker":2}}]'
    job["metadata"]["annotations"] = {"fleet.sh/world": world,
                                      "fleet.sh/replica-offsets": '{"worker":3}'}
    job["spec"]["worker"]["replicas"] = 2
    assert [t.name for t in T9K_MPI.replica_types(job)] == ["worker"]
    job["metadata"]["annotations"]["fleet.sh/replica-offsets"] = '{"worker":0}'
    assert [t.name for t in T9K_MPI.replica_types(job)] == ["launcher", "worker"]


def test_a_split_t9k_launchers_hostfile_names_the_other_members_workers_by_mcs() -> None:
    job = example("t9k-mpijob-random-walk.yaml")
    world = ('[{"cluster":"a","replicas":{"worker":3},"offsets":{"worker":0}},'
             '{"cluster":"b","replicas":{"worker":2},"offsets":{"worker":3}}]')
    job["metadata"]["annotations"] = {"fleet.sh/world": world,
                                      "fleet.sh/replica-offsets": '{"worker":0}'}
    job["spec"]["worker"]["replicas"] = 3
    assert T9K_MPI.hosts(job) == [
        "job-worker-0.job.ns.svc", "job-worker-1.job.ns.svc", "job-worker-2.job.ns.svc",
        "job-worker-3.b.job.ns.svc.clusterset.local", "job-worker-4.b.job.ns.svc.clusterset.local"]
    # and the hub gives both shares one key, which it names as the agent does
    assert T9K_MPI_ADAPTER.generated_secrets(job) == ((T9K_MPI.ssh_key_secret(job), "ssh"),)
