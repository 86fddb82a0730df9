"""A job's TensorBoard (``spec.tensorboardSpec``) as a Deployment and Service on the member.

T9k creates a ``TensorBoard`` object for it; fleet's members need no T9k operator, so the
agent runs TensorBoard itself: a Deployment ``<job>-tensorboard`` with the given image,
reading every ``t9k://pvc/<claim>/<path>`` log location from its claim mounted read-only at
``/t9k/pvc/<claim>``, and a Service of the same name on port 6006. ``status.tensorboard``
reports it the way T9k does (action, dependent, note, ready, reason, type).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleet.api.protocol import TENSORBOARD_FOR
from fleet.clients import resources as r
from fleet.kinds.naming import derived_name, label_value

Body = dict[str, Any]
PORT = 6006
MOUNT_ROOT = "/t9k/pvc"
LOCATION = re.compile(r"^t9k://pvc/(?P<claim>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(?P<path>/.*)?$")


def name_of(job: Mapping[str, Any]) -> str:
    return derived_name(job["metadata"]["name"], "tensorboard")


def log_dirs(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(claim, directory in the container) of each log location."""
    out = []
    for location in spec.get("trainingLogFilesets") or []:
        match = LOCATION.match(location)
        if match:
            claim = match.group("claim")
            out.append((claim, f"{MOUNT_ROOT}/{claim}{match.group('path') or ''}"))
    return out


def objects(job: Mapping[str, Any], owner: Body) -> list[tuple[r.Resource, Body]]:
    spec = job["spec"].get("tensorboardSpec")
    if not spec:
        return []
    meta = job["metadata"]
    name = name_of(job)
    labels = {TENSORBOARD_FOR: label_value(meta["name"])}
    dirs = log_dirs(spec)
    claims = sorted({claim for claim, _ in dirs})
    if len(dirs) == 1:
        logdir = ["--logdir", dirs[0][1]]
    else:
        logdir = ["--logdir_spec", ",".join(f"{claim}-{i}:{path}"
                                            for i, (claim, path) in enumerate(dirs))]
    deployment: Body = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "ownerReferences": [owner]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{
                        "name": "tensorboard", "image": spec["image"],
                        "command": ["tensorboard"],
                        "args": [*logdir, "--bind_all", "--port", str(PORT)],
                        "ports": [{"name": "http", "containerPort": PORT}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": PORT}},
                        "volumeMounts": [{"name": f"log-{i}", "mountPath": f"{MOUNT_ROOT}/{c}",
                                          "readOnly": True} for i, c in enumerate(claims)],
                    }],
                    "volumes": [{"name": f"log-{i}", "persistentVolumeClaim": {
                        "claimName": c, "readOnly": True}} for i, c in enumerate(claims)],
                },
            },
        },
    }
    service: Body = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels,
                     "ownerReferences": [owner]},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": PORT,
                                                "targetPort": PORT}]},
    }
    return [(r.DEPLOYMENTS, deployment), (r.SERVICES, service)]


def status(job: Mapping[str, Any], deployment: Mapping[str, Any] | None) -> Body | None:
    """``status.tensorboard`` for the job, given its Deployment as last seen (or None)."""
    if not job["spec"].get("tensorboardSpec"):
        return None
    name = name_of(job)
    if deployment is None:
        return {"action": "CREATE", "note": f"TensorBoard [{name}] is being created",
                "ready": False, "reason": "DependentCreating", "type": "Normal"}
    meta = deployment["metadata"]
    ready = int((deployment.get("status") or {}).get("availableReplicas") or 0) >= 1
    return {
        "action": "NOP",
        "dependent": {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                      "namespace": meta["namespace"], "uid": meta.get("uid", "")},
        "note": f"TensorBoard [{name}] is {'ready' if ready else 'not ready yet'}",
        "ready": ready,
        "reason": "DependentReady" if ready else "DependentNotReady",
        "type": "Normal",
    }
