"""Member-side failures: the agent's share health and what the hub shows of it."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.api.protocol import MEMBER_FAILURE_REASONS, MEMBER_WAITING_REASONS
from fleet.hub.job_views import work_view
from fleet.hub.member_failures import current, member_wait, replica_failure, with_member_conditions
from member_agent.member_failures import CAUSES, Refusal, classify, health

QUOTA = ('pods "a" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
         'used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu={limit}')


# One row per cause in member_failures.CAUSES (and the errors that are no refusal): a passing
# cause classed permanent would show a failure the member lifts by itself; a permanent one
# classed passing would keep a job waiting for a change that never comes.
@pytest.mark.parametrize(("status", "message", "reason"), [
    # passing: the member lifts them by itself
    (403, 'pods "a" is forbidden: error looking up service account ns/default: '
     'serviceaccount "default" not found', "ServiceAccountNotReady"),
    (404, 'serviceaccounts "launcher" not found', "ServiceAccountNotReady"),
    (403, 'pods "a" is forbidden: unable to create new content in namespace ns because it is '
     'being terminated', "NamespaceNotReady"),
    (404, 'namespaces "gone" not found', "NamespaceNotReady"),
    (500, 'Internal error occurred: failed calling webhook "deny.example.com": failed to call '
     'webhook: Post "https://deny.default.svc:443/check": connection refused',
     "MemberAdmissionUnavailable"),
    (403, QUOTA.format(limit=4), "MemberQuotaFull"),
    (403, QUOTA.format(limit="4") + ", exceeded quota: cpus, requested: requests.cpu=500m, "
     "used: requests.cpu=3500m, limited: requests.cpu=4", "MemberQuotaFull"),
    # permanent: the job's or the member's configuration
    (403, QUOTA.format(limit=1), "MemberQuotaExceeded"),  # more than the quota ever holds
    (403, 'pods "a" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=1',
     "MemberQuotaExceeded"),  # unreadable: shown, not waited for
    (403, 'pods "a" is forbidden: failed quota: mem: must specify limits.memory for: pytorch',
     "MemberQuotaExceeded"),
    (403, 'pods "a" is forbidden: no PriorityClass with name hub-only was found',
     "PriorityClassNotFound"),
    (400, 'admission webhook "deny.example.com" denied the request: no', "AdmissionDenied"),
    (403, 'pods "a" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'b\' denied '
     'request: no pods here', "AdmissionDenied"),
    (422, 'pods "a" is forbidden: ValidatingAdmissionPolicy \'p\' with binding \'b\' denied '
     'request: no pods here', "AdmissionDenied"),
    (403, 'pods "a" is forbidden: User "agent" cannot create resource "pods"', "Forbidden"),
    (422, 'Pod "a" is invalid: spec.containers[0].image: Required value', "Invalid"),
    (404, 'the server could not find the requested resource', "PodCreateRefused"),
    # no refusal: retried as they are
    (500, "etcdserver: request timed out", None),
    (503, "the server is currently unable to handle the request", None),
    (429, "too many requests", None),
    (409, "conflict", None),
    (409, 'Operation cannot be fulfilled on resourcequotas "gpus": the object has been '
     'modified; please apply your changes to the latest version and try again', None),
    (500, 'Internal error occurred: resourcequota "gpus" could not be evaluated', None),
    (0, "connection refused", None),
])
def test_refusals_are_classed_by_cause(status: int, message: str, reason: str | None) -> None:
    assert classify(status, message) == reason
    assert reason is None or reason in MEMBER_FAILURE_REASONS | MEMBER_WAITING_REASONS
    assert not MEMBER_FAILURE_REASONS & MEMBER_WAITING_REASONS


def test_every_cause_has_a_row_above() -> None:
    causes = {reason for reason, _ in CAUSES if reason} | {"PodCreateRefused"}
    assert causes == (MEMBER_WAITING_REASONS | MEMBER_FAILURE_REASONS) - {
        "ImagePullFailed", "ContainerConfigInvalid", "CrashLooping"}  # the kubelet's


def pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def test_a_refused_pod_makes_the_share_unhealthy_naming_the_member() -> None:
    refusal = Refusal("train-master-0", "PriorityClassNotFound",
                      "no PriorityClass with name hub-only was found")
    share = health("member1", [], refusal)
    assert not share.healthy
    assert share.reason == "PriorityClassNotFound"
    assert share.message == ("member1: pod train-master-0 refused: no PriorityClass with name "
                             "hub-only was found")
    waiting = health("member1", [], Refusal("p", "ServiceAccountNotReady", "not made yet"))
    assert (waiting.healthy, waiting.reason) == (False, "ServiceAccountNotReady")
    assert waiting.message == "member1: pod p waits: not made yet"


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
    status = with_member_conditions({"conditions": [{"type": "Created", "status": "True"}]},
                                    failure)
    assert [c["type"] for c in status["conditions"]] == ["Created", "ReplicaFailure"]
    assert current(status, "ReplicaFailure") == ("ImagePullFailed", "m1: pod a cannot pull")
    healed = with_member_conditions(status, replica_failure([work("m1", "Healthy", "", "True")]))
    assert [c["type"] for c in healed["conditions"]] == ["Created"]
    assert current(healed, "ReplicaFailure") is None


def test_a_passing_cause_shows_as_waiting_and_goes_when_it_passes() -> None:
    works = [work("m2", "ServiceAccountNotReady", "m2: pod b waits: no account yet"),
             work("m1", "Healthy", "", "True")]
    assert replica_failure(works) is None
    wait = member_wait(works)
    assert wait is not None
    status = with_member_conditions({"conditions": [{"type": "Created", "status": "True"}]},
                                    None, wait)
    assert [c["type"] for c in status["conditions"]] == ["Created", "Waiting"]
    assert current(status, "Waiting") == ("ServiceAccountNotReady",
                                          "m2: pod b waits: no account yet")
    both = with_member_conditions(status, replica_failure(
        [work("m1", "ImagePullFailed", "pod a cannot pull")]), wait)
    assert [c["type"] for c in both["conditions"]] == ["Created", "Waiting", "ReplicaFailure"]
    passed = with_member_conditions(both, None, member_wait([work("m2", "Healthy", "", "True")]))
    assert [c["type"] for c in passed["conditions"]] == ["Created"]


def test_a_members_own_replica_failure_is_kept() -> None:
    own = {"type": "ReplicaFailure", "status": "True", "reason": "BackoffLimitExceeded"}
    assert with_member_conditions({"conditions": [own]}, None)["conditions"] == [own]


def test_a_share_waiting_for_a_passing_cause_counts_toward_failover() -> None:
    """A wait that outlasts the policy's toleration moves the gang, as a failure does."""
    waiting = work("m1", "MemberQuotaFull", "m1: pod a waits: exceeded quota")
    waiting["metadata"] = {"namespace": "fleet-member-m1", "name": "w"}
    waiting["spec"]["manifests"] = [{"metadata": {}}]
    view = work_view(waiting)
    assert view.unhealthy
    assert view.unhealthy_since is not None
    assert view.unhealthy_reason == "m1: pod a waits: exceeded quota"
