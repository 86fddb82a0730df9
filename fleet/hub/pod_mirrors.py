"""Mirror pods: a job's member pods shown on the hub, read-only, so that ``kubectl get pods``,
``kubectl logs`` and the Kubeflow SDK work on the hub unchanged.

Each member with a kubelet endpoint (the agent's log server, in its MemberCluster status) is a
node on the hub, ``fleet-member-<cluster>``: tainted so nothing schedules there, its address and
kubelet port the agent's, so the hub's API server sends ``pods/log`` of pods bound to it to the
agent, which streams them from the member (as virtual-kubelet does). For every pod a Work
reports, the hub keeps a pod of the same name in the job's namespace, bound to that node, with
the member pod's labels and containers and a status derived from the report.

It costs hub writes: a create and a status write per pod, and a status write per change of
phase, readiness or restarts (changes that fall between two reports coalesce into one). So it is
a choice: the governing (Cluster)PropagationPolicy or the job asks for it with the annotation
``fleet.sh/mirror-pods: "true"``. Mirrors carry an owner reference to the hub job, so the
garbage collector removes them with it; the hub removes those whose Work or pod is gone.

Pure: bodies in, bodies and decisions out; no clock, no client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.api.protocol import MEMBER_NAMESPACE_PREFIX, MIRROR_OF, MIRROR_PODS

Body = dict[str, Any]
PodKey = tuple[str, str]  # namespace, name

MIRROR_WORK = "fleet.sh/mirror-work"  # annotation on a mirror: <namespace>/<name> of its Work
KUBERNETES_MIRROR = "kubernetes.io/config.mirror"
NODE_TAINT = "fleet.sh/member"
ENDPOINT = "fleet.sh/kubelet-endpoint"  # annotation on a member's node: address:port
# Bounds: mirrors kept on the hub in all (the rest of the pods are not mirrored; a warning and
# a metric say so) and containers per mirror (as the pod schema's own bound).
MAX_MIRRORS = 5_000
MAX_CONTAINERS = 32
PLACEHOLDER_IMAGE = "mirror.fleet.sh/unknown"


def node_name(cluster: str) -> str:
    return f"{MEMBER_NAMESPACE_PREFIX}{cluster}"


def wants_mirrors(job: Mapping[str, Any] | None, policy: Mapping[str, Any] | None) -> bool:
    """The job's own annotation wins; else its governing policy's."""
    for body in (job, policy):
        value = ((body or {}).get("metadata", {}).get("annotations") or {}).get(MIRROR_PODS)
        if value is not None:
            return str(value).lower() == "true"
    return False


def node(cluster: str, address: str, port: int) -> Body:
    """The member's node on the hub (spec and metadata; its status: ``node_status``)."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name(cluster),
                     "labels": {"type": "virtual-kubelet", MIRROR_OF: cluster,
                                "kubernetes.io/role": "member"},
                     "annotations": {ENDPOINT: f"{address}:{port}"}},
        "spec": {"taints": [{"key": NODE_TAINT, "value": cluster, "effect": "NoSchedule"}]},
    }


def node_status(address: str, port: int, now: str) -> Body:
    return {
        "addresses": [{"type": "InternalIP", "address": address}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "conditions": [{"type": "Ready", "status": "True", "reason": "AgentHeartbeat",
                        "message": "the member's agent serves this node's pods' logs",
                        "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "nodeInfo": {"kubeletVersion": "fleet-agent", "operatingSystem": "linux",
                     "architecture": "amd64", "machineID": "", "systemUUID": "", "bootID": "",
                     "kernelVersion": "", "osImage": "", "containerRuntimeVersion": "",
                     "kubeProxyVersion": ""},
    }


def node_lease(cluster: str, holder_seconds: int, now_micro: str) -> Body:
    """The node's Lease in ``kube-node-lease``: renewed while the agent's heartbeat is fresh,
    so the hub's node lifecycle controller keeps the node Ready (and leaves its pods alone)."""
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node_name(cluster), "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": node_name(cluster),
                     "leaseDurationSeconds": holder_seconds, "renewTime": now_micro}}


@dataclass(frozen=True)
class Mirror:
    key: PodKey
    body: Body  # metadata and spec, for the create
    status: Body  # for the status subresource


def mirrors_of(work: Mapping[str, Any], job: Mapping[str, Any]) -> list[Mirror]:
    """The mirrors of the pods a Work reports (its job's, on the Work's member)."""
    spec = work.get("spec") or {}
    cluster = str(spec.get("placement", {}).get("cluster", ""))
    manifest = (spec.get("manifests") or [{}])[0]
    images = _images(manifest)
    jmeta = job["metadata"]
    namespace = str(jmeta.get("namespace") or "")
    wmeta = work["metadata"]
    out = []
    for pod in (work.get("status") or {}).get("pods") or []:
        name = pod.get("name")
        if not isinstance(name, str) or not name:
            continue
        containers = [str(c) for c in (pod.get("containers") or [])][:MAX_CONTAINERS] \
            or [next(iter(images), "main")]
        labels = {str(k): str(v) for k, v in (pod.get("labels") or {}).items()}
        labels[MIRROR_OF] = cluster
        body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": namespace, "labels": labels,
                "annotations": {MIRROR_WORK: f"{wmeta.get('namespace')}/{wmeta['name']}",
                                # What Kubernetes calls a pod shown for one a kubelet runs from
                                # elsewhere: admission leaves its spec alone (no service
                                # account of the namespace is looked up or mounted).
                                KUBERNETES_MIRROR: "fleet.sh"},
                "ownerReferences": [{"apiVersion": job["apiVersion"], "kind": job["kind"],
                                     "name": jmeta["name"], "uid": jmeta["uid"],
                                     "blockOwnerDeletion": False}],
            },
            "spec": {
                "nodeName": node_name(cluster),
                "containers": [{"name": c, "image": images.get(c, PLACEHOLDER_IMAGE)}
                               for c in containers],
                "restartPolicy": "Never",
                # No kubelet confirms a graceful delete here: the garbage collector's and
                # ours take effect at once.
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "tolerations": [{"operator": "Exists"}],
            },
        }
        out.append(Mirror((namespace, name), body, _status(pod, containers, images)))
    return out


def _status(pod: Mapping[str, Any], containers: list[str], images: Mapping[str, str]) -> Body:
    phase = str(pod.get("phase") or "Pending")
    ready = bool(pod.get("ready"))
    restarts = int(pod.get("restarts") or 0)
    started = pod.get("startTime")
    if phase == "Running":
        state: Body = {"running": {"startedAt": started} if started else {}}
    elif phase in ("Succeeded", "Failed"):
        code = pod.get("exitCode")
        code = int(code) if code is not None else (0 if phase == "Succeeded" else 1)
        state = {"terminated": {"exitCode": code,
                                "reason": "Completed" if code == 0 else "Error"}}
    else:
        state = {"waiting": {"reason": "ContainerCreating"}}
    status: Body = {
        "phase": phase,
        "conditions": [{"type": "PodScheduled", "status": "True"},
                       {"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [{"name": c, "ready": ready, "restartCount": restarts,
                               "image": images.get(c, PLACEHOLDER_IMAGE), "imageID": "",
                               "state": state} for c in containers],
    }
    if started:
        status["startTime"] = started
    return status


def _images(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Container name -> image, from every pod template in a job manifest (any kind)."""
    found: dict[str, str] = {}
    stack: list[Any] = [manifest]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            containers = item.get("containers")
            for container in containers if isinstance(containers, list) else []:
                if isinstance(container, Mapping) and container.get("name"):
                    found.setdefault(str(container["name"]), str(container.get("image") or
                                                                 PLACEHOLDER_IMAGE))
            stack.extend(v for v in item.values() if isinstance(v, Mapping | list))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, Mapping | list))
    return found


def _member(body: Mapping[str, Any]) -> str | None:
    return (body.get("metadata", {}).get("labels") or {}).get(MIRROR_OF)


def _shown(status: Mapping[str, Any]) -> tuple[object, ...]:
    """What a mirror's status shows of its member pod: equal means no write."""
    return (
        status.get("phase"), status.get("startTime"),
        tuple(sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or [])),
        tuple((c.get("name"), c.get("ready"), c.get("restartCount"),
               tuple(sorted((c.get("state") or {}).keys())),
               ((c.get("state") or {}).get("terminated") or {}).get("exitCode"))
              for c in status.get("containerStatuses") or []),
    )


@dataclass(frozen=True)
class Plan:
    create: list[Mirror] = field(default_factory=list)
    update_status: list[Mirror] = field(default_factory=list)
    delete: list[Body] = field(default_factory=list)
    over_limit: int = 0  # desired mirrors left out by MAX_MIRRORS


def plan(desired: Iterable[Mirror], existing: Mapping[PodKey, Mapping[str, Any]],
         *, limit: int = MAX_MIRRORS) -> Plan:
    """Creates, status writes and deletes that make the hub's mirrors match ``desired``.
    ``existing`` holds the hub's mirror pods (label ``MIRROR_OF``); a pod of a mirror's name
    that is not a mirror is left alone. Sorted, so equal inputs give equal plans."""
    wanted = {m.key: m for m in sorted(desired, key=lambda m: m.key)}
    kept = dict(list(wanted.items())[:limit])
    out = Plan(over_limit=len(wanted) - len(kept))
    for key, mirror in kept.items():
        have = existing.get(key)
        if have is None:
            out.create.append(mirror)
        elif _member(have) != _member(mirror.body):
            out.delete.append(dict(have))  # its job moved: the next pass mirrors it anew
        elif _shown(have.get("status") or {}) != _shown(mirror.status):
            out.update_status.append(mirror)
    out.delete.extend(dict(body) for key, body in sorted(existing.items()) if key not in kept)
    return out
