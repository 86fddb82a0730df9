"""A TrainJob's JobSet on a member: a flux one's scripts and CURVE certificate, and a split
one's peers on other members."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from cryptography.hazmat.primitives.asymmetric import x25519

from fleet import jobkeys
from fleet.api import protocol, runtimes
from fleet.hub.binder import split_keys
from fleet.hub.cache import Cache
from fleet.hub.job_views import policy_view
from fleet.hub.works import work_body
from fleet.kinds.trainer_runtime import resolve
from fleet.kinds.trainjob import TRAINJOB
from member_agent import fencing
from member_agent.controllers.jobset import JOBSET
from propagation.jobkey import JobKey
from propagation.views import FitMode
from tests.unit.test_trainjob import FLUX_JOB, SDK_BODY, runtime, stamped

Body = dict[str, Any]


def test_z85_is_zeromqs_base85() -> None:
    # RFC 32's test vector
    assert jobkeys.z85(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == \
        "HelloWorld"


def z85_decode(text: str) -> bytes:
    out = b""
    for start in range(0, len(text), 5):
        word = 0
        for char in text[start:start + 5]:
            word = word * 85 + jobkeys.Z85.index(char)
        out += word.to_bytes(4, "big")
    return out


def test_each_certificate_is_a_fresh_x25519_pair_in_zeromqs_format() -> None:
    text = jobkeys.curve_certificate("lammps")
    public, secret = (re.search(f'{part}-key = "(.{{40}})"', text) for part in ("public",
                                                                            "secret"))
    assert public is not None
    assert secret is not None
    key = x25519.X25519PrivateKey.from_private_bytes(z85_decode(secret.group(1)))
    assert key.public_key().public_bytes_raw() == z85_decode(public.group(1))
    assert 'name = "lammps"' in text
    assert jobkeys.curve_certificate("lammps") != text  # random, not derived from the job
    data = jobkeys.curve_secret_data("lammps")
    assert base64.b64decode(data["curve.cert"]).decode().startswith("#   ZeroMQ CURVE")


def test_the_agent_writes_a_flux_jobsets_scripts_and_asks_for_its_certificate() -> None:
    jobset = resolve(FLUX_JOB, runtime(runtimes.flux_distributed()))
    objects = {body["kind"]: body for _, body in JOBSET.objects(jobset, [], [])}
    assert objects["ConfigMap"]["metadata"]["name"] == "lammps-flux-entrypoint"
    assert set(objects["ConfigMap"]["data"]) == {"init.sh", "entrypoint.sh"}
    assert objects["ConfigMap"]["metadata"]["ownerReferences"][0]["name"] == "lammps"
    assert JOBSET.curve_secret(jobset) == "lammps-flux-curve"
    plain = resolve(SDK_BODY, runtime(runtimes.torch_distributed()))
    assert JOBSET.curve_secret(plain) is None


def member_copy(jobset: Body, cluster: str, placement: list[Body]) -> Body:
    """The copy of ``jobset`` the hub gives ``cluster`` when it splits it by ``placement``."""
    share = next(s for s in placement if s["cluster"] == cluster)
    copy = json.loads(json.dumps(jobset))
    copy["metadata"]["annotations"].update({
        **protocol.copy_marks(cluster, "w", share, placement, 1),
        protocol.SHARE_REPLICAS: json.dumps(share["replicas"])})
    return copy


def test_a_split_jobsets_pods_name_their_peers_on_other_members_by_mcs() -> None:
    job = json.loads(json.dumps(SDK_BODY))
    job["spec"]["trainer"]["numNodes"] = 3
    jobset = resolve(job, runtime(runtimes.torch_distributed()))
    placement = [{"cluster": "member1", "replicas": {"node": 1}, "offsets": {"node": 0}},
                 {"cluster": "member2", "replicas": {"node": 2}, "offsets": {"node": 1}}]
    theirs = member_copy(jobset, "member2", placement)
    [node] = JOBSET.replica_types(theirs)
    pod = JOBSET.pod(theirs, node, 1, "", None)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"] == \
        "a4e6bba01a2e-node-0-0.member1.a4e6bba01a2e.team.svc.clusterset.local"
    assert JOBSET.peer_host(theirs, "node", 2) == "a4e6bba01a2e-node-0-2.a4e6bba01a2e"
    ours = member_copy(jobset, "member1", placement)
    [node] = JOBSET.replica_types(ours)
    env = {e["name"]: e.get("value")
           for e in JOBSET.pod(ours, node, 0, "", None)["spec"]["containers"][0]["env"]}
    assert env["PET_MASTER_ADDR"] == "a4e6bba01a2e-node-0-0.a4e6bba01a2e"  # its own
    assert JOBSET.remote_hosts(jobset) == {}  # one member: nothing to rename


def test_a_split_mpi_jobsets_hostfile_names_the_other_members_nodes_by_mcs() -> None:
    job = stamped({**SDK_BODY, "spec": {"runtimeRef": {"name": "deepspeed-distributed"},
                                        "trainer": {"numNodes": 3}}},
                  runtimes.deepspeed_distributed())
    jobset = TRAINJOB.with_replicas(job, {"node": 2, "launcher": 1})
    placement = [{"cluster": "a", "replicas": {"node": 1, "launcher": 1},
                  "offsets": {"node": 0, "launcher": 0}},
                 {"cluster": "b", "replicas": {"node": 1}, "offsets": {"node": 1}}]
    objects = {body["kind"]: body for _, body in
               JOBSET.objects(member_copy(jobset, "a", placement), [], [])}
    assert objects["ConfigMap"]["data"]["hostfile"] == (
        "a4e6bba01a2e-node-0-0.a4e6bba01a2e slots=1\n"
        "a4e6bba01a2e-node-0-1.b.a4e6bba01a2e.team.svc.clusterset.local slots=1\n"
        "a4e6bba01a2e-launcher-0-0.a4e6bba01a2e slots=1\n")


def test_the_hub_gives_every_share_of_a_split_trainjob_the_same_keys() -> None:
    job = stamped({**SDK_BODY, "spec": {"runtimeRef": {"name": "deepspeed-distributed"},
                                        "trainer": {"numNodes": 3}}},
                  runtimes.deepspeed_distributed())
    placement = [{"cluster": "a", "replicas": {"node": 1, "launcher": 1},
                  "offsets": {"node": 0, "launcher": 0}},
                 {"cluster": "b", "replicas": {"node": 1}, "offsets": {"node": 1}}]
    cache = Cache()
    assert split_keys(job, TRAINJOB, cache.snapshot(), placement[:1]) == []  # one member
    [key] = split_keys(job, TRAINJOB, cache.snapshot(), placement)
    assert (key["metadata"]["name"], key["type"]) == ("a4e6bba01a2e-mpi-ssh-auth",
                                                      "kubernetes.io/ssh-auth")
    works = [work_body(job, TRAINJOB, share, placement, [key]) for share in placement]
    assert works[0]["spec"]["manifests"][1] == works[1]["spec"]["manifests"][1]
    cache.upsert("works", works[0])  # a later dispatch (a roll forward) reuses it
    assert split_keys(job, TRAINJOB, cache.snapshot(), placement) == [key]
    # the key is the hub's to carry, not a reference the user must propagate
    assert ("Secret", "a4e6bba01a2e-mpi-ssh-auth") not in TRAINJOB.dependencies(job)


def test_a_member_trainer_policy_places_whole_and_its_work_carries_the_trainjob() -> None:
    body = {"apiVersion": "policy.one.alibabacloud.com/v1alpha1", "kind": "PropagationPolicy",
            "metadata": {"name": "p", "namespace": "team",
                         "annotations": {protocol.TRAINJOB_RUNNER: "member-trainer"}},
            "spec": {"resourceSelectors": [{"apiVersion": "trainer.kubeflow.org/v1alpha1",
                                            "kind": "TrainJob"}],
                     "placement": {"spreadConstraints": [{"spreadByField": "cluster",
                                                          "maxGroups": 3}]}}}
    view = policy_view(body, FitMode.NODE_AWARE)
    assert (view.member_trainer, view.rules.max_clusters) == (True, 1)
    job = stamped(SDK_BODY, runtimes.torch_distributed())
    share = {"cluster": "a", "replicas": {"node": 2}, "offsets": {"node": 0}}
    work = work_body(job, TRAINJOB, share, [share], member_trainer=True)
    manifest, runtime_copy = work["spec"]["manifests"]
    assert manifest["kind"] == "TrainJob"
    assert manifest["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org",
                                              "kind": "TrainingRuntime",
                                              "name": "a4e6bba01a2e-runtime"}
    assert "managedBy" not in manifest["spec"]
    assert runtime_copy["kind"] == "TrainingRuntime"
    assert runtime_copy["spec"] == runtimes.torch_distributed()["spec"]  # the snapshot
    # the hub still reads the share's demand from the manifest: the snapshot travels with it
    assert TRAINJOB.demand("k", manifest).roles[0].replicas == 2
    # without the policy's word, the Work carries the resolved JobSet
    plain = work_body(job, TRAINJOB, share, [share])
    assert plain["spec"]["manifests"][0]["kind"] == "JobSet"


def test_the_hub_copies_the_members_trainers_status_as_it_is() -> None:
    job = stamped(SDK_BODY, runtimes.torch_distributed())
    share = {"cluster": "a", "replicas": {"node": 2}, "offsets": {"node": 0}}
    work = work_body(job, TRAINJOB, share, [share], member_trainer=True)
    done = {"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": "t"}
    work["status"] = {"jobStatus": {"conditions": [done], "jobsStatus": [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 2, "failed": 0,
         "suspended": 0}]}}
    status = TRAINJOB.aggregate({**job, "status": {"clusters": ["a"]}}, [work], "now")
    assert status == {"clusters": ["a"], "conditions": [done], "jobsStatus": [
        {"name": "node", "active": 0, "ready": 0, "succeeded": 2, "failed": 0,
         "suspended": 0}]}


def test_pods_another_controller_made_are_never_swept_as_orphans() -> None:
    key = JobKey("TrainJob.trainer.kubeflow.org/team/t")
    jobs = {key: {"metadata": {"uid": "trainjob-uid"}}}
    by_trainer = {"metadata": {"name": "t-node-0-0", "namespace": "team",
                               "labels": {protocol.JOB_UID: "hub-uid"},
                               "ownerReferences": [{"kind": "Job", "uid": "job-uid",
                                                    "controller": True}]}}
    assert fencing.orphaned_pods({key: [by_trainer]}, jobs) == []
    ours = {"metadata": {**by_trainer["metadata"], "ownerReferences": [
        {"kind": "TrainJob", "uid": "an-older-copy", "controller": True}]}}
    assert fencing.orphaned_pods({key: [ours]}, jobs) == [("team", "t-node-0-0", "")]
