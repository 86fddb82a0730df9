"""What a job's pod templates reference in its namespace: ConfigMaps, Secrets and
PersistentVolumeClaims, which ``propagateDeps`` sends to members with the job."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fleet.api.protocol import PROPAGATED_LABEL

CONFIGMAP, SECRET, PVC = "ConfigMap", "Secret", "PersistentVolumeClaim"
T9K_PVC_PREFIX = "t9k://pvc/"


def template_references(template: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(kind, name) of every object one pod template needs from its namespace."""
    spec = template.get("spec") or {}
    found: set[tuple[str, str]] = set()
    for volume in spec.get("volumes") or []:
        if (cm := volume.get("configMap")) and cm.get("name"):
            found.add((CONFIGMAP, cm["name"]))
        if (secret := volume.get("secret")) and secret.get("secretName"):
            found.add((SECRET, secret["secretName"]))
        if (claim := volume.get("persistentVolumeClaim")) and claim.get("claimName"):
            found.add((PVC, claim["claimName"]))
        for source in (volume.get("projected") or {}).get("sources") or []:
            if (cm := source.get("configMap")) and cm.get("name"):
                found.add((CONFIGMAP, cm["name"]))
            if (secret := source.get("secret")) and secret.get("name"):
                found.add((SECRET, secret["name"]))
    for pull in spec.get("imagePullSecrets") or []:
        if pull.get("name"):
            found.add((SECRET, pull["name"]))
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        for source in container.get("envFrom") or []:
            if (cm := source.get("configMapRef")) and cm.get("name"):
                found.add((CONFIGMAP, cm["name"]))
            if (secret := source.get("secretRef")) and secret.get("name"):
                found.add((SECRET, secret["name"]))
        for env in container.get("env") or []:
            ref = env.get("valueFrom") or {}
            if (cm := ref.get("configMapKeyRef")) and cm.get("name"):
                found.add((CONFIGMAP, cm["name"]))
            if (secret := ref.get("secretKeyRef")) and secret.get("name"):
                found.add((SECRET, secret["name"]))
    return found


def t9k_references(job: Mapping[str, Any]) -> set[tuple[str, str]]:
    """T9k TensorBoards read logs from ``t9k://pvc/<claim>/<path>``."""
    filesets: Iterable[str] = ((job.get("spec") or {}).get("tensorboardSpec") or {}).get(
        "trainingLogFilesets") or []
    return {(PVC, f[len(T9K_PVC_PREFIX):].split("/", 1)[0]) for f in filesets
            if f.startswith(T9K_PVC_PREFIX)}


def dependency_manifest(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as a member should receive it: no server-set fields, no status."""
    meta = body["metadata"]
    out = {k: v for k, v in body.items() if k not in ("metadata", "status")}
    out["metadata"] = {"name": meta["name"], "namespace": meta["namespace"],
                       "labels": dict(meta.get("labels") or {}),
                       "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                                       if not k.startswith(("kubectl.kubernetes.io/",
                                                            "pv.kubernetes.io/",
                                                            "volume.kubernetes.io/"))}}
    if body.get("kind") == PVC:
        spec = dict(out.get("spec") or {})
        spec.pop("volumeName", None)  # the member binds its own volume
        out["spec"] = spec
    return out


PRIORITYCLASS = "PriorityClass"


def priority_class_names(job: Mapping[str, Any], templates: Iterable[Mapping[str, Any]]
                         ) -> list[str]:
    """The PriorityClasses a job names: its Kubeflow ``runPolicy.schedulingPolicy.
    priorityClass`` first, then its pod templates' ``priorityClassName`` (unique, in order)."""
    spec = job.get("spec") or {}
    names = [((spec.get("runPolicy") or {}).get("schedulingPolicy") or {}).get("priorityClass")]
    names.extend((t.get("spec") or {}).get("priorityClassName") for t in templates)
    return list(dict.fromkeys(n for n in names if n))


def priority_class_manifest(body: Mapping[str, Any]) -> dict[str, Any]:
    """A hub PriorityClass as members get it: the same name, value and preemption policy,
    never the global default (a member's default is its own business)."""
    out: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1", "kind": PRIORITYCLASS,
        "metadata": {"name": body["metadata"]["name"], "labels": {PROPAGATED_LABEL: "true"}},
        "value": int(body.get("value", 0)),
    }
    for key in ("preemptionPolicy", "description"):
        if body.get(key) is not None:
            out[key] = body[key]
    return out
