"""runPolicy as the training operator reads it: managedBy (who runs the job) and
schedulingPolicy.minAvailable (the gang's minimum), and one name per job across kinds."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from e2e.jobs import seed_pytorchjob
from e2e.localfleet import REPO
from fleet.api.kubeflow import MULTIKUEUE_MANAGER, OPERATOR_MANAGER
from fleet.hub.works import work_body
from fleet.kinds import adapter_for, checks, managed_elsewhere
from tests.unit.test_protocol import bound_job

Body = dict[str, Any]


def with_run_policy(**fields: Any) -> Body:
    job = seed_pytorchjob("train", "team")
    job["spec"]["runPolicy"] = {**(job["spec"].get("runPolicy") or {}), **fields}
    return job


@pytest.mark.parametrize(("manager", "elsewhere"), [
    (None, None), (OPERATOR_MANAGER, None), (MULTIKUEUE_MANAGER, MULTIKUEUE_MANAGER),
    ("someone/else", "someone/else")])  # (stored before the CRD's rule: the operator skips it)
def test_only_the_operators_own_name_or_none_leaves_the_job_to_fleet(
        manager: str | None, elsewhere: str | None) -> None:
    job = with_run_policy(**({"managedBy": manager} if manager else {}))
    assert managed_elsewhere(job) == elsewhere


def test_a_kind_without_managed_by_is_always_fleets() -> None:
    assert managed_elsewhere({"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "MPIJob",
                              "spec": {"runPolicy": {"managedBy": MULTIKUEUE_MANAGER}}}) is None
    assert managed_elsewhere({"apiVersion": "v1", "kind": "ConfigMap"}) is None


@pytest.mark.parametrize(("before", "after"), [
    (None, OPERATOR_MANAGER), (OPERATOR_MANAGER, None), (OPERATOR_MANAGER, MULTIKUEUE_MANAGER)])
def test_managed_by_never_changes_after_creation(before: str | None, after: str | None) -> None:
    old = with_run_policy(**({"managedBy": before} if before else {}))
    new = with_run_policy(**({"managedBy": after} if after else {}))
    refused = checks.managed_by_changed(old, new)
    assert refused is not None
    assert refused.startswith("spec.runPolicy.managedBy:")
    assert "immutable" in refused
    assert checks.managed_by_changed(old, copy.deepcopy(old)) is None


def test_the_crd_allows_only_the_operators_two_managers() -> None:
    crd = yaml.safe_load((REPO / "crds" / "pytorchjobs.kubeflow.org.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = spec["properties"]["runPolicy"]["properties"]["managedBy"][
        "x-kubernetes-validations"]
    assert any(OPERATOR_MANAGER in r["rule"] and MULTIKUEUE_MANAGER in r["rule"] for r in rules)
    assert any(r["rule"] == "self == oldSelf" for r in rules)


def test_the_member_copy_is_left_alone_by_a_members_own_training_operator() -> None:
    job, placement = bound_job()
    work = work_body(job, adapter_for(job["apiVersion"], job["kind"]), placement[0], placement)
    manifest = work["spec"]["manifests"][0]
    assert manifest["spec"]["runPolicy"]["managedBy"] == MULTIKUEUE_MANAGER
    assert "managedBy" not in (job["spec"].get("runPolicy") or {})  # the hub job untouched


@pytest.mark.parametrize(("minimum", "waits"), [(None, False), (1, False), (3, False),
                                                 (4, True), (10, True)])
def test_a_gang_minimum_above_the_replicas_keeps_the_job_waiting(minimum: int | None,
                                                                  waits: bool) -> None:
    job = with_run_policy(**({"schedulingPolicy": {"minAvailable": minimum}}
                             if minimum else {}))  # the seed job: 1 master, 2 workers
    reason = checks.gang_unsatisfiable(job)
    assert (reason is not None) == waits
    if reason:
        assert reason.startswith("spec.runPolicy.schedulingPolicy.minAvailable: ")
        assert f"{minimum} pods" in reason
        assert "has 3" in reason


def test_a_second_kind_may_not_take_a_jobs_name() -> None:
    hub: dict[tuple[str, str, str, str], Body] = {}
    job = seed_pytorchjob("train", "team")
    tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
          "metadata": {"name": "train", "namespace": "team"}}

    def existing(api_version: str, kind: str, namespace: str, name: str) -> Body | None:
        return hub.get((api_version, kind, namespace, name))

    assert checks.name_taken(tf, existing) is None
    hub[("kubeflow.org/v1", "PyTorchJob", "team", "train")] = job
    refused = checks.name_taken(tf, existing)
    assert refused is not None
    assert refused.startswith("metadata.name: PyTorchJob team/train")
    assert checks.name_taken(job, existing) is None  # its own kind: the API server's answer
    other = {**tf, "metadata": {"name": "train", "namespace": "elsewhere"}}
    assert checks.name_taken(other, existing) is None


def test_of_two_kinds_created_at_once_the_older_runs_and_the_other_says_why() -> None:
    py = seed_pytorchjob("train", "team")
    py["metadata"]["creationTimestamp"] = "2026-11-29T07:00:00Z"
    tf = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
          "metadata": {"name": "train", "namespace": "team",
                       "creationTimestamp": "2026-11-29T07:00:00Z"}}
    hub = {(b["apiVersion"], b["kind"]): b for b in (py, tf)}

    def existing(api_version: str, kind: str, namespace: str, name: str) -> Body | None:
        return hub.get((api_version, kind))

    # the same second: by kind, PyTorchJob before TFJob
    assert checks.name_taken_earlier(py, existing) is None
    waits = checks.name_taken_earlier(tf, existing)
    assert waits is not None
    assert waits.startswith("metadata.name: PyTorchJob team/train (kubeflow.org)")
    tf["metadata"]["creationTimestamp"] = "2026-11-29T06:59:59Z"
    assert checks.name_taken_earlier(tf, existing) is None
    assert checks.name_taken_earlier(py, existing) is not None
