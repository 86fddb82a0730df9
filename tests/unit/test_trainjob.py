"""TrainJob (Kubeflow Trainer v2.3.0) resolved against its runtime into the JobSet Trainer
would make (``pkg/runtime/framework/plugins``), and its status as Trainer writes it."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from fleet.api import protocol, runtimes
from fleet.api.trainer import ClusterTrainingRuntime, TrainJob
from fleet.hub import trainer_runtimes
from fleet.kinds import adapter_for, flux
from fleet.kinds.base import InvalidJob
from fleet.kinds.trainer_runtime import hostfile, resolve
from fleet.kinds.trainjob import TRAINJOB, trainjob_status

Body = dict[str, Any]
# What the kubeflow 0.5.0 SDK posts for CustomTrainer(func, num_nodes=2, resources_per_node=
# {"cpu": 2, "memory": "4Gi"}): no apiGroup, quantities as JSON numbers.
SDK_BODY: Body = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {"name": "a4e6bba01a2e", "namespace": "team", "uid": "u1"},
    "spec": {"runtimeRef": {"kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
             "trainer": {"command": ["bash", "-c", "torchrun fake.py"], "numNodes": 2,
                         "resourcesPerNode": {"limits": {"cpu": 2.0, "memory": "4Gi"},
                                              "requests": {"cpu": 2.0, "memory": "4Gi"}}}}}


def runtime(body: Body) -> Body:
    return {"kind": body["kind"], "name": body["metadata"]["name"], "spec": body["spec"]}


def stamped(job: Body, made_from: Body) -> Body:
    out = json.loads(json.dumps(job))
    out["metadata"].setdefault("annotations", {})[protocol.RUNTIME] = json.dumps(
        runtime(made_from))
    return out


def env(container: Body) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_the_shipped_runtimes_parse() -> None:
    for body in runtimes.defaults():
        ClusterTrainingRuntime.model_validate(body)
    TrainJob.model_validate(SDK_BODY)


def test_a_torch_trainjob_resolves_to_trainers_jobset() -> None:
    jobset = resolve(SDK_BODY, runtime(runtimes.torch_distributed()))
    assert jobset["kind"] == "JobSet"
    assert jobset["metadata"]["name"] == "a4e6bba01a2e"
    [node_job] = jobset["spec"]["replicatedJobs"]
    spec = node_job["template"]["spec"]
    assert (spec["parallelism"], spec["completions"]) == (2, 2)
    [node] = spec["template"]["spec"]["containers"]
    assert node["command"] == ["bash", "-c", "torchrun fake.py"]
    assert node["resources"]["limits"] == {"cpu": 2.0, "memory": "4Gi"}
    assert env(node) == {
        "PET_NNODES": "2", "PET_NPROC_PER_NODE": "2",  # no GPU: the CPUs
        "PET_NODE_RANK": {"fieldRef": {"fieldPath":
                                       "metadata.annotations['batch.kubernetes.io/"
                                       "job-completion-index']"}},
        "PET_MASTER_ADDR": "a4e6bba01a2e-node-0-0.a4e6bba01a2e", "PET_MASTER_PORT": "29500"}
    assert {"name": "trainer", "containerPort": 29500} in node["ports"]
    assert jobset["spec"]["suspend"] is False


def test_gpus_per_node_leave_torchrun_to_count_them() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": 4}}
    node = resolve(job, runtime(runtimes.torch_distributed()))["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]["spec"]["containers"][0]
    assert env(node)["PET_NPROC_PER_NODE"] == "auto"


def with_policy(policy: Body, node_resources: Body | None = None) -> Body:
    """The shipped torch runtime with another ML policy (and the node's own resources)."""
    made = runtime(runtimes.torch_distributed())
    made["spec"] = {**made["spec"], "mlPolicy": {"numNodes": 1, **policy}}
    if node_resources is not None:
        made["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"]["spec"]["containers"][0]["resources"] = node_resources
    return made


def node_of(jobset: Body) -> Body:
    node: Body = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]
    return node


INDEX = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/"
                                   "job-completion-index']"}}


def test_a_jax_trainjob_gets_jaxs_process_variables() -> None:
    node = node_of(resolve(SDK_BODY, with_policy({"jax": {}})))
    assert env(node) == {"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": INDEX,
                         "JAX_COORDINATOR_ADDRESS": "a4e6bba01a2e-node-0-0.a4e6bba01a2e:29500"}
    assert {"name": "trainer", "containerPort": 29500} in node["ports"]


def test_an_xgboost_trainjob_counts_a_worker_per_gpu_else_per_node() -> None:
    cpu_only = node_of(resolve(SDK_BODY, with_policy({"xgboost": {}})))
    assert env(cpu_only) == {"DMLC_TRACKER_URI": "a4e6bba01a2e-node-0-0.a4e6bba01a2e",
                             "DMLC_TRACKER_PORT": "29500", "DMLC_TASK_ID": INDEX,
                             "DMLC_NUM_WORKER": "2"}
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": 4}}
    assert env(node_of(resolve(job, with_policy({"xgboost": {}}))))["DMLC_NUM_WORKER"] == "8"
    # Without the TrainJob's resources, the runtime's node counts (a zero request defers to
    # the limit, as Trainer reads it).
    del job["spec"]["trainer"]["resourcesPerNode"]
    gpus = {"requests": {"nvidia.com/gpu": 0}, "limits": {"nvidia.com/gpu": 2}}
    assert env(node_of(resolve(job, with_policy({"xgboost": {}}, gpus))))[
        "DMLC_NUM_WORKER"] == "4"


def test_each_policy_reserves_its_own_variables() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["trainer"]["env"] = [{"name": "DMLC_NUM_WORKER", "value": "9"}]
    with pytest.raises(InvalidJob, match=r"spec.trainer.env\[name=DMLC_NUM_WORKER\]"):
        resolve(job, with_policy({"xgboost": {}}))
    assert env(node_of(resolve(job, runtime(runtimes.torch_distributed()))))[
        "DMLC_NUM_WORKER"] == "9"  # torch's runtime leaves XGBoost's names to the user
    job["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "9"}]
    assert env(node_of(resolve(job, with_policy({}))))["PET_NNODES"] == "9"  # plain


def test_the_trainjobs_gang_is_its_jobsets_pods_and_its_works_carry_the_jobset() -> None:
    job = stamped(SDK_BODY, runtimes.torch_distributed())
    demand = TRAINJOB.demand("k", job)
    assert [(r.name, r.replicas) for r in demand.roles] == [("node", 2)]
    assert demand.roles[0].request["cpu"] == 2000
    share = TRAINJOB.with_replicas(job, {"node": 1})
    assert share["kind"] == "JobSet"
    assert json.loads(share["metadata"]["annotations"][protocol.SHARE_REPLICAS]) == {"node": 1}
    assert adapter_for("trainer.kubeflow.org/v1alpha1", "TrainJob") is TRAINJOB
    assert TRAINJOB.demand("k", share).roles[0].replicas == 1  # a Work's JobSet reads alike


def test_an_mpi_trainjob_gets_ssh_keys_a_hostfile_and_a_launcher_that_is_a_node() -> None:
    job = stamped({**SDK_BODY, "spec": {
        "runtimeRef": {"name": "deepspeed-distributed"},
        "trainer": {"numNodes": 3, "command": ["mpirun", "python", "train.py"]}}},
        runtimes.deepspeed_distributed())
    jobset = TRAINJOB.with_replicas(job, {"node": 2, "launcher": 1})
    jobs = {j["name"]: j for j in jobset["spec"]["replicatedJobs"]}
    assert jobs["node"]["template"]["spec"]["parallelism"] == 2  # the launcher is the third
    launcher = jobs["launcher"]["template"]["spec"]["template"]["spec"]
    assert launcher["containers"][0]["command"] == ["mpirun", "python", "train.py"]
    assert env(launcher["containers"][0])["OMPI_MCA_orte_default_hostfile"] == \
        "/etc/mpi/hostfile"
    assert {v["name"] for v in launcher["volumes"]} == {"mpi-ssh-auth", "mpi-hostfile"}
    mounts = {m["name"]: m["mountPath"] for m in launcher["containers"][0]["volumeMounts"]}
    assert mounts == {"mpi-ssh-auth": "/home/mpiuser/.ssh", "mpi-hostfile": "/etc/mpi"}
    assert hostfile(jobset) == (f"{'a4e6bba01a2e'}-node-0-0.a4e6bba01a2e slots=1\n"
                                "a4e6bba01a2e-node-0-1.a4e6bba01a2e slots=1\n"
                                "a4e6bba01a2e-launcher-0-0.a4e6bba01a2e slots=1\n")


def test_runtime_patches_merge_by_name_and_must_name_the_runtimes_jobs() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["runtimePatches"] = [{"manager": "trainer.kubeflow.org/kubeflow-sdk",
                                      "trainingRuntimeSpec": {"template": {"spec": {
                                          "replicatedJobs": [{"name": "node", "template": {
                                              "spec": {"template": {
                                                  "metadata": {"annotations": {"a": "b"}},
                                                  "spec": {"nodeSelector": {"zone": "z1"}}}}}}]}}}}]
    pod = resolve(job, runtime(runtimes.torch_distributed()))["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"a": "b"}
    assert pod["spec"]["nodeSelector"] == {"zone": "z1"}
    assert pod["spec"]["containers"][0]["name"] == "node"
    job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"][0]["name"] = "nope"
    with pytest.raises(InvalidJob, match=r"runtimePatches\[0\].*replicatedJobs\[name=nope\]"):
        resolve(job, runtime(runtimes.torch_distributed()))


def test_the_ml_policys_variables_may_not_be_given() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["trainer"]["env"] = [{"name": "PET_NNODES", "value": "9"}]
    with pytest.raises(InvalidJob, match=r"spec.trainer.env\[name=PET_NNODES\]"):
        resolve(job, runtime(runtimes.torch_distributed()))


def test_the_webhooks_snapshot_names_a_missing_runtime() -> None:
    found = {("trainer.kubeflow.org/v1alpha1/ClusterTrainingRuntime", "",
              "torch-distributed"): runtimes.torch_distributed()}
    text = trainer_runtimes.snapshot(SDK_BODY, lambda ref: found.get(ref.key))
    assert json.loads(text)["spec"]["mlPolicy"] == {"numNodes": 1, "torch": {}}
    missing = {**SDK_BODY, "spec": {"runtimeRef": {"name": "nope", "kind": "TrainingRuntime"}}}
    with pytest.raises(trainer_runtimes.RuntimeMissing,
                       match=r'spec\.runtimeRef\.name: TrainingRuntime "nope" not found in '
                             r"namespace team"):
        trainer_runtimes.snapshot(missing, lambda ref: found.get(ref.key))
    with pytest.raises(InvalidJob, match=r"spec\.runtimeRef"):
        TRAINJOB.demand("k", SDK_BODY)  # stored without a snapshot: said, never a crash


def test_trainers_status_has_its_three_conditions_only() -> None:
    running = trainjob_status({}, {"conditions": [], "replicatedJobsStatus": [
        {"name": "node", "ready": 1, "active": 1}]}, False, "t1")
    assert running == {"conditions": [], "jobsStatus": [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]}
    assert TRAINJOB.state(running) == "Running"
    done = trainjob_status(running, {"conditions": [
        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
         "message": "jobset completed successfully", "lastTransitionTime": "t2"}],
        "replicatedJobsStatus": []}, False, "t3")
    assert done["conditions"] == [{"type": "Complete", "status": "True",
                                   "reason": "AllJobsCompleted",
                                   "message": "jobset completed successfully",
                                   "lastTransitionTime": "t2"}]
    assert TRAINJOB.state(done) == "Succeeded"
    assert TRAINJOB.finished(done)
    suspended = trainjob_status({}, {}, True, "t4")
    assert [(c["type"], c["status"], c["reason"]) for c in suspended["conditions"]] == [
        ("Suspended", "True", "Suspended")]
    resumed = trainjob_status(suspended, {}, False, "t5")
    assert [(c["type"], c["status"], c["reason"]) for c in resumed["conditions"]] == [
        ("Suspended", "False", "Resumed")]


@pytest.mark.parametrize("patch", [
    {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
        "template": "not a template"}}}]}}},
    {"template": {"spec": {"replicatedJobs": "nope"}}},
    {"template": "nope"},
])
def test_a_malformed_runtime_patch_is_said_naming_the_patches(patch: Body) -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["runtimePatches"] = [{"manager": "m", "trainingRuntimeSpec": patch}]
    with pytest.raises(InvalidJob, match=r"^spec\.runtime"):
        TRAINJOB.demand("k", stamped(job, runtimes.torch_distributed()))


def test_the_webhook_names_the_field_of_a_malformed_trainjob() -> None:
    from pydantic import ValidationError

    from fleet.hub.admission import first_error
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["runtimeRef"] = 7
    with pytest.raises(ValidationError) as refused:
        TrainJob.model_validate(job)
    assert first_error(refused.value).startswith("spec.runtimeRef: ")


def test_a_deadline_fails_the_trainjob_as_trainer_says_it() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["activeDeadlineSeconds"] = 600
    jobset = resolve(job, runtime(runtimes.torch_distributed()))
    assert jobset["metadata"]["annotations"][protocol.ACTIVE_DEADLINE] == "600"
    failed = trainjob_status({}, {"conditions": [
        {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
         "message": "jobset js was active longer than ...", "lastTransitionTime": "t"}]},
        False, "t")
    assert failed["conditions"][0]["message"] == "TrainJob exceeded its active deadline"


FLUX_JOB: Body = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
    "metadata": {"name": "lammps", "namespace": "team", "uid": "u2"},
    "spec": {"runtimeRef": {"name": "flux-distributed"}, "trainer": {
        "numNodes": 2, "numProcPerNode": 4, "image": "metric-lammps",
        "command": ["lmp", "-in", "in file"], "args": ["-nocite"],
        "env": [{"name": "FLUX_VIEW_IMAGE", "value": "flux-view-rocky:tag-9"}]}}}


def test_a_flux_trainjob_gets_the_installer_its_scripts_and_a_wrapped_command() -> None:
    jobset = resolve(FLUX_JOB, runtime(runtimes.flux_distributed()))
    [node_job] = jobset["spec"]["replicatedJobs"]
    pod = node_job["template"]["spec"]["template"]["spec"]
    [installer] = pod["initContainers"]
    assert (installer["name"], installer["image"]) == ("flux-installer", "flux-view-rocky:tag-9")
    assert installer["command"] == ["/bin/bash", "/etc/flux-config/init.sh"]
    [node] = pod["containers"]
    assert node["command"] == ["/bin/bash", "/etc/flux-config/entrypoint.sh",
                               "lmp -in 'in file' -nocite"]  # quoted for the shell
    assert "args" not in node
    mounts = {m["name"]: m["mountPath"] for m in node["volumeMounts"]}
    assert mounts == {"flux-install": "/mnt/flux", "spack-install": "/opt/software",
                      "lammps-flux-entrypoint": "/etc/flux-config", "flux-curve": "/curve",
                      "shared-memory": "/dev/shm"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["flux-curve"]["secret"]["secretName"] == "lammps-flux-curve"
    assert volumes["lammps-flux-entrypoint"]["configMap"]["name"] == "lammps-flux-entrypoint"
    assert json.loads(jobset["metadata"]["annotations"][protocol.FLUX]) == {
        "nodes": 2, "procs_per_node": 4, "gpus_per_node": 0, "device": "eth0",
        "queue_policy": "fcfs"}


def test_a_flux_jobsets_scripts_run_its_command_over_every_node(tmp_path: Any) -> None:
    job = json.loads(json.dumps(FLUX_JOB))
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": 2}}
    scripts = flux.scripts(resolve(job, runtime(runtimes.flux_distributed())))
    assert scripts is not None
    init, entrypoint = scripts["init.sh"], scripts["entrypoint.sh"]
    assert "echo 'lammps-node-0-[0-1]'" in init
    assert 'default_connect = "tcp://%h.lammps.team.svc.cluster.local:%p"' in init
    assert "--cores=0-3 --gpu=0-1" in entrypoint
    assert 'flux run -N 2 -n 8 -g 2 bash -c "$1"' in entrypoint
    assert '"$(hostname)" = "lammps-node-0-0"' in entrypoint
    for name, text in scripts.items():  # both parse as bash
        (tmp_path / name).write_text(text)
        subprocess.run(["bash", "-n", str(tmp_path / name)], check=True)
    plain = resolve(SDK_BODY, runtime(runtimes.torch_distributed()))
    assert flux.scripts(plain) is None


def test_a_flux_runtime_keeps_its_installers_name_to_itself() -> None:
    made = runtimes.flux_distributed()
    made["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"]["initContainers"] = [{"name": "flux-installer", "image": "mine"}]
    with pytest.raises(InvalidJob, match=r"spec\.trainer\.initContainers"):
        resolve(FLUX_JOB, runtime(made))
