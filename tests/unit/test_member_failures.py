"""Member-side failures: the agent's share health and what the hub shows of it."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.api.protocol import MEMBER_FAILURE_REASONS
from fleet.hub.member_failures import current_failure, replica_failure, with_replica_failure
from member_agent.member_failures import Refusal, health, refusal_reason


@pytest.mark.parametrize(("status", "message", "reason"), [
    (403, 'pods "a" is forbidden: no PriorityClass with name hub-only was found',
     "PriorityClassNotFound"),
    (403, 'pods "a" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=1',
     "MemberQuotaExceeded"),
    (400, 'admission webhook "deny.example.com" denied the request: no', "AdmissionDenied"),
    (403, 'pods "a" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'b\' denied '
     'request: no pods here', "AdmissionDenied"),
    (422, 'pods "a" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'b\' denied '
     'request: no pods here', "AdmissionDenied"),
    (403, 'pods "a" is forbidden: User "agent" cannot create resource "pods"', "Forbidden"),
    (422, 'Pod "a" is invalid: spec.containers[0].image: Required value', "Invalid"),
    (404, 'namespaces "gone" not found', "PodCreateRefused"),
    (500, "etcdserver: request timed out", None),
    (429, "too many requests", None),
    (409, "conflict", None),
    (0, "connection refused", None),
])
def test_refusals_are_named_and_transient_errors_are_not(status: int, message: str,
                                                         reason: str | None) -> None:
    assert refusal_reason(status, message) == reason
    assert reason is None or reason in MEMBER_FAILURE_REASONS


def pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def test_a_refused_pod_makes_the_share_unhealthy_naming_the_member() -> None:
    refusal = Refusal("train-master-0", 403, "no PriorityClass with name hub-only was found")
    share = health("member1", [], refusal)
    assert not share.healthy
    assert share.reason == "PriorityClassNotFound"
    assert share.message == ("member1: pod train-master-0 refused: no PriorityClass with name "
                             "hub-only was found")
    assert health("member1", [], Refusal("p", 503, "unavailable")).healthy


def test_image_pulls_and_unschedulable_pods_make_the_share_unhealthy() -> None:
    pulling = pod("w-0", containerStatuses=[{"name": "pytorch", "state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image \"nope\""}}}])
    share = health("member2", [pulling], None)
    assert (share.healthy, share.reason) == (False, "ImagePullFailed")
    assert share.message.startswith("member2: pod w-0 container pytorch: ImagePullBackOff")
    pending = pod("w-1", conditions=[{"type": "PodScheduled", "status": "False",
                                      "reason": "Unschedulable", "message": "0/4 nodes"}])
    share = health("member2", [pending], None)
    assert (share.healthy, share.reason) == (False, "Unschedulable")
    assert health("member2", [pod("w-2", phase="Running")], None).healthy


def test_a_crash_looping_container_makes_the_share_unhealthy() -> None:
    looping = pod("w-3", phase="Running", containerStatuses=[{
        "name": "pytorch", "restartCount": 4, "state": {"waiting": {
            "reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}}])
    share = health("member1", [looping], None)
    assert (share.healthy, share.reason) == (False, "CrashLooping")
    assert share.message.startswith("member1: pod w-3 container pytorch: CrashLoopBackOff")


def work(cluster: str, reason: str, message: str, healthy: str = "False") -> dict[str, Any]:
    return {"spec": {"placement": {"cluster": cluster}}, "status": {"conditions": [
        {"type": "Healthy", "status": healthy, "reason": reason, "message": message,
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def test_the_hub_shows_the_first_failing_member_last_in_the_conditions() -> None:
    works = [work("m2", "MemberQuotaExceeded", "m2: pod b refused: exceeded quota"),
             work("m1", "ImagePullFailed", "pod a cannot pull"),
             work("m0", "Unschedulable", "pod c unschedulable")]
    failure = replica_failure(works)
    assert failure is not None
    assert (failure["reason"], failure["message"]) == ("ImagePullFailed", "m1: pod a cannot pull")
    status = with_replica_failure({"conditions": [{"type": "Created", "status": "True"}]},
                                  failure)
    assert [c["type"] for c in status["conditions"]] == ["Created", "ReplicaFailure"]
    assert current_failure(status) == ("ImagePullFailed", "m1: pod a cannot pull")
    healed = with_replica_failure(status, replica_failure([work("m1", "Healthy", "", "True")]))
    assert [c["type"] for c in healed["conditions"]] == ["Created"]
    assert current_failure(healed) is None


def test_a_members_own_replica_failure_is_kept() -> None:
    own = {"type": "ReplicaFailure", "status": "True", "reason": "BackoffLimitExceeded"}
    assert with_replica_failure({"conditions": [own]}, None)["conditions"] == [own]
