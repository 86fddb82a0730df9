"""Member-side failures of a job's share: the member refuses its pods, or cannot run them.

Pure: the refusal the job controller last met creating a pod, and the share's pods, in; the
share's health out (the Work's ``Healthy`` condition: reason and a message naming the member).
An unhealthy share counts toward application failover on the hub. The hub shows the reasons
in ``MEMBER_FAILURE_REASONS`` as a ``ReplicaFailure`` on the job, and those in
``MEMBER_WAITING_REASONS`` (causes the member lifts by itself) as a ``Waiting`` condition:
a refusal is classed by its cause (:data:`CAUSES`), not by its status code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from fleet.api.protocol import MEMBER_WAITING_REASONS
from fleet.api.quantity import QuantityError, parse_quantity

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
    """Why the member does not take one of the job's pods now: its API server refused it
    (classed by :func:`classify`), or the agent holds it back until the member is ready
    for it (the ServiceAccount its pods run as)."""

    pod: str
    reason: str  # one of MEMBER_FAILURE_REASONS or MEMBER_WAITING_REASONS
    message: str

    @property
    def passing(self) -> bool:
        return self.reason in MEMBER_WAITING_REASONS


@dataclass(frozen=True)
class Health:
    healthy: bool
    reason: str = "Healthy"
    message: str = ""


# A refusal's cause, from the member API server's status code and its message (as sent and
# in lower case). Rows are tried in order; the first that matches names the cause (None: no
# refusal, retried as it is, nothing to report). Passing
# causes (MEMBER_WAITING_REASONS) are ones the member lifts by itself: the job controller
# retries them with its backoff and the hub shows them as a wait. The others come from the
# job's or the member's configuration: the hub shows them as a ReplicaFailure at once (the
# controller still retries them, with the same backoff, in case the member is changed).
Matcher = Callable[[int, str, str], bool]
CAUSES: tuple[tuple[str | None, Matcher], ...] = (
    # an admission webhook that cannot be reached (failurePolicy Fail) refuses everything:
    # a server error, and the one a member lifts by itself that is worth telling
    ("MemberAdmissionUnavailable", lambda status, text, low: "failed calling webhook" in low),
    # conflicts (a quota's usage written by two pod creations at once), throttling, server
    # errors and timeouts, whatever their message names
    (None, lambda status, text, low: status in (0, 409, 429) or status >= 500),
    # a namespace just made, whose account kube-controller-manager has not made yet
    ("ServiceAccountNotReady", lambda status, text, low: "error looking up service account"
     in low or (status == 404 and low.startswith("serviceaccounts "))),
    # the namespace is going (a copy removed and applied again) or not there yet
    ("NamespaceNotReady", lambda status, text, low: "because it is being terminated" in low
     or (status == 404 and low.startswith("namespaces "))),
    ("PriorityClassNotFound", lambda status, text, low: "priorityclass" in low),
    # a quota full now, with room for the pod once its other users finish
    ("MemberQuotaFull", lambda status, text, low: "exceeded quota" in low
     and quota_fits_when_empty(text)),
    # a pod a quota can never hold, or one it refuses for its form (no limits given)
    ("MemberQuotaExceeded", lambda status, text, low: "exceeded quota" in low
     or "failed quota" in low or "resourcequota" in low),
    ("AdmissionDenied", lambda status, text, low: "admission webhook" in low
     or "denied the request" in low or "validatingadmissionpolicy" in low),
    ("Forbidden", lambda status, text, low: status == 403),  # RBAC and other refusals
    ("Invalid", lambda status, text, low: status in (400, 422)),  # the pod as written
)


def classify(status: int, message: str) -> str | None:
    """The cause of a refused pod creation; None when it is no refusal (a conflict,
    throttling, a server error or a timeout: retried as they are, nothing to report)."""
    low = message.lower()
    for reason, matches in CAUSES:
        if matches(status, message, low):
            return reason
    return "PodCreateRefused"


_QUOTA = re.compile(r"exceeded quota: [^,]*, requested: (?P<requested>\S*), used: \S*, "
                    r"limited: (?P<limited>[^\s;]*)")


def quota_fits_when_empty(message: str) -> bool:
    """Whether the pod a quota refused asks no more than the quota's hard limits, so that it
    fits once the quota's other users finish (False when the message cannot be read)."""
    found = _QUOTA.search(message)
    if found is None:
        return False
    try:
        requested = _amounts(found.group("requested"))
        limited = _amounts(found.group("limited"))
    except QuantityError:
        return False
    return bool(requested) and all(
        name in limited and amount <= limited[name] for name, amount in requested.items())


def _amounts(text: str) -> dict[str, Decimal]:
    """``requests.cpu=2,requests.nvidia.com/gpu=1`` as amounts by resource name."""
    out: dict[str, Decimal] = {}
    for item in text.rstrip(",").split(","):
        name, _, value = item.partition("=")
        out[name] = parse_quantity(value)
    return out


def health(cluster: str, pods: Sequence[Mapping[str, Any]], refusal: Refusal | None) -> Health:
    """A share is unhealthy while the member refuses one of its pods, while one of its pods
    cannot pull its image, start its container or keep it running (crash loop), or while one
    cannot be scheduled."""
    if refusal is not None:
        said = "waits" if refusal.passing else "refused"
        return Health(False, refusal.reason, _cut(f"{cluster}: pod {refusal.pod} {said}: "
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
