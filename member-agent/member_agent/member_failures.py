"""Member-side failures of a job's share: the member refuses its pods, or cannot run them.

Pure: the refusal the job controller last met creating a pod, and the share's pods, in; the
share's health out (the Work's ``Healthy`` condition: reason and a message naming the member).
An unhealthy share counts toward application failover on the hub, and the reasons in
``MEMBER_FAILURE_REASONS`` also show on the hub job (``ReplicaFailure`` and an event).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api.protocol import MEMBER_FAILURE_REASONS

MAX_MESSAGE = 300
IMAGE_PULL = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                        "ErrImageNeverPull", "RegistryUnavailable"})
CONTAINER_CONFIG = frozenset({"CreateContainerConfigError", "CreateContainerError"})
WAITING_REASONS = {**dict.fromkeys(IMAGE_PULL, "ImagePullFailed"),
                   **dict.fromkeys(CONTAINER_CONFIG, "ContainerConfigInvalid"),
                   # the kubelet backs off restarting a container that keeps exiting: the
                   # application crash-loops here (Karmada's application failover counts it)
                   "CrashLoopBackOff": "CrashLooping"}


@dataclass(frozen=True)
class Refusal:
    """The member's API server refused to create one of the job's pods."""

    pod: str
    status: int
    message: str


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str = "Healthy"
    message: str = ""


def refusal_reason(status: int, message: str) -> str | None:
    """Why the member refused a pod, as a member-failure reason; None when the error is not a
    refusal (conflicts, throttling, server errors and timeouts are retried, not reported)."""
    if status in (0, 409, 429) or status >= 500:
        return None
    text = message.lower()
    if "priorityclass" in text:
        reason = "PriorityClassNotFound"
    elif "exceeded quota" in text or "resourcequota" in text:
        reason = "MemberQuotaExceeded"
    elif "admission webhook" in text or "denied the request" in text or \
            "validatingadmissionpolicy" in text:
        reason = "AdmissionDenied"
    elif status == 403:
        reason = "Forbidden"
    elif status in (400, 422):
        reason = "Invalid"
    else:
        reason = "PodCreateRefused"
    assert reason in MEMBER_FAILURE_REASONS
    return reason


def health(cluster: str, pods: Sequence[Mapping[str, Any]], refusal: Refusal | None) -> Health:
    """A share is unhealthy while the member refuses one of its pods, while one of its pods
    cannot pull its image, start its container or keep it running (crash loop), or while one
    cannot be scheduled."""
    if refusal is not None:
        reason = refusal_reason(refusal.status, refusal.message)
        if reason is not None:
            return Health(False, reason, _cut(f"{cluster}: pod {refusal.pod} refused: "
                                              f"{refusal.message}"))
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        for container in (status.get("initContainerStatuses") or []) + (
                status.get("containerStatuses") or []):
            waiting = (container.get("state") or {}).get("waiting") or {}
            why = str(waiting.get("reason") or "")
            if why in WAITING_REASONS:
                return Health(False, WAITING_REASONS[why], _cut(
                    f"{cluster}: pod {name} container {container.get('name', '?')}: {why}: "
                    f"{waiting.get('message', '')}".rstrip(": ")))
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if (condition.get("type") == "PodScheduled" and condition.get("status") == "False"
                    and condition.get("reason") == "Unschedulable"):
                return Health(False, "Unschedulable", f"pod {pod['metadata']['name']} "
                              "unschedulable: " + str(condition.get("message", ""))[:200])
    return Health(True)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"
