"""What a job kind tells the shared core: how its pods look, what its run policy says, and
how its status is written. What the kind is (its resource, where its roles live, which one
leads, how its status reads) comes from its description in :mod:`fleet.kinds`, the one the hub
reads too. Kinds are pure; ``reconcile`` drives them."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fleet.api import protocol
from fleet.clients.resources import Resource
from fleet.kinds.base import KindAdapter
from fleet.kinds.naming import label_value, replica_name
from member_agent.controllers import core
from member_agent.controllers.gang import Gang, GangRequest

Body = dict[str, Any]
CLUSTERSET_DOMAIN = "clusterset.local"


@dataclass(frozen=True)
class RunMode:
    """``stop``: why no pods run ("" when they do: "Suspended", "Paused"); ``variant``: how
    new pods are made ("", "debug", "resume"); ``attempt``: the whole job's current attempt
    ("" the first; pods of another are stale)."""

    stop: str = ""
    variant: str = ""
    attempt: str = ""


@dataclass(frozen=True)
class Observed:
    """Everything a reconcile reads besides the job and its pods."""

    now: datetime
    gang: Gang | None = None
    gang_admitted: bool = True
    extras: Mapping[str, Any] = field(default_factory=dict)  # e.g. the TensorBoard Deployment


class JobKind:
    """Base of every kind; subclasses fill in how the kind runs and writes its status."""

    description: KindAdapter  # what the kind is: shared with the hub
    container: str  # the training container the controller configures
    job_label: str  # pod labels the controller sets and reads back
    type_label: str
    index_label: str
    retryable_codes: frozenset[int] | None = None  # None: Kubeflow's rule (>= 128)

    @property
    def resource(self) -> Resource:
        return self.description.resource

    @property
    def kind(self) -> str:
        return self.description.resource.kind

    @property
    def group(self) -> str:
        return self.description.resource.group

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.group}"

    # -- spec --------------------------------------------------------------------------
    def replica_specs(self, job: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        return self.description.replica_specs(job)

    def default_restart(self, rtype: str) -> core.Restart:
        raise NotImplementedError

    def replica_types(self, job: Mapping[str, Any]) -> list[core.ReplicaType]:
        offsets = protocol.replica_offsets(job["metadata"])
        return [
            core.ReplicaType(
                name=name, replicas=int(spec.get("replicas", 1)),
                restart=core.Restart(spec.get("restartPolicy") or self.default_restart(name)),
                template=spec.get("template") or {}, offset=int(offsets.get(name, 0)),
            )
            for name, spec in self.replica_specs(job)
        ]

    def run_policy(self, job: Mapping[str, Any]) -> Mapping[str, Any]:
        return job["spec"].get("runPolicy") or {}

    def run_mode(self, job: Mapping[str, Any]) -> RunMode:
        raise NotImplementedError

    def backoff_limit(self, job: Mapping[str, Any]) -> int | None:
        value = self.run_policy(job).get("backoffLimit")
        return None if value is None else int(value)

    def deadline(self, job: Mapping[str, Any]) -> int | None:
        value = self.run_policy(job).get("activeDeadlineSeconds")
        return None if value is None else int(value)

    def ttl(self, job: Mapping[str, Any]) -> int | None:
        return None

    def cleanup(self, job: Mapping[str, Any]) -> core.Cleanup:
        raise NotImplementedError

    stop_unfinished_on_failure = False

    def leader(self, types: Sequence[str]) -> tuple[str, int]:
        """The replica whose success ends the job."""
        return self.description.leader_role(types), 0

    def held_types(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                   pods: Sequence[core.ObservedPod]) -> frozenset[str]:
        """Replica types whose pods must wait (an MPI launcher waits for ready workers)."""
        return frozenset()

    def objects(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                pods: Sequence[core.ObservedPod]) -> list[tuple[Resource, Body]]:
        """Per-job objects kept as given while the job lives (ConfigMaps, RBAC, Services)."""
        return []

    def ssh_key_secret(self, job: Mapping[str, Any]) -> str | None:
        """The Secret holding the job's SSH key, if the kind needs one (made by the shell:
        a key is random, so no pure function makes it)."""
        return None

    def curve_secret(self, job: Mapping[str, Any]) -> str | None:
        """The Secret holding the job's Flux CURVE certificate, if it runs Flux (made by the
        shell, as the SSH key)."""
        return None

    def clean_up(self, job: Mapping[str, Any], pods: Sequence[core.ObservedPod],
                 failed: bool) -> list[str]:
        """Pods to delete once the job has finished."""
        return core.to_clean_up(pods, self.cleanup(job),
                                stop_unfinished=failed and self.stop_unfinished_on_failure)

    def gang_request(self, job: Mapping[str, Any]) -> GangRequest:
        """What the job asks its member's gang scheduler for."""
        return GangRequest()

    def pod_name(self, job_name: str, rtype: str, index: int) -> str:
        return replica_name(job_name, rtype, index)

    # -- world (a job split across clusters) ---------------------------------------------
    def world(self, job: Mapping[str, Any]) -> dict[str, int]:
        """Replicas per type across every cluster the job runs in."""
        shares = protocol.world(job["metadata"])
        if not shares:
            return {t.name: t.replicas for t in self.replica_types(job)}
        total: dict[str, int] = {}
        for share in shares:
            for name, count in share["replicas"].items():
                total[name] = total.get(name, 0) + count
        return total

    def holder(self, job: Mapping[str, Any], rtype: str, index: int) -> str | None:
        """The member holding replica ``index`` of ``rtype`` of a split job (None unless
        the hub split it)."""
        return next((str(share["cluster"]) for share in protocol.world(job["metadata"])
                     if index in protocol.share_indices(share, rtype)), None)

    def is_local(self, job: Mapping[str, Any], rtype: str, index: int) -> bool:
        """Whether replica ``index`` of ``rtype`` runs in this cluster (always, unless the
        hub split the job: then this cluster holds only its share's indices)."""
        if not protocol.world_text(job["metadata"]):
            return True
        return any(t.name == rtype and index in t.indices() for t in self.replica_types(job))

    def peer_host(self, job: Mapping[str, Any], rtype: str, index: int,
                  *, qualified: bool = False) -> str:
        """How a replica reaches replica ``index`` of ``rtype``: its Service in this cluster,
        or, across clusters, the Multi-Cluster Services name (KEP-1645) of the Service the
        peer's agent exports, ``<svc>.<ns>.svc.clusterset.local``."""
        meta = job["metadata"]
        name = self.pod_name(meta["name"], rtype, index)
        if not self.is_local(job, rtype, index):
            return f"{name}.{meta['namespace']}.svc.{CLUSTERSET_DOMAIN}"
        return f"{name}.{meta['namespace']}.svc" if qualified else name

    # -- objects -------------------------------------------------------------------------
    def labels(self, job: Mapping[str, Any], rtype: str, index: int) -> dict[str, str]:
        meta = job["metadata"]
        labels = {self.job_label: label_value(meta["name"]), self.type_label: rtype.lower(),
                  self.index_label: str(index)}
        uid = (meta.get("labels") or {}).get(protocol.JOB_UID)
        if uid:
            labels[protocol.JOB_UID] = uid
        return labels

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        return []

    def port(self, job: Mapping[str, Any], rtype: str) -> tuple[str, int] | None:
        """(name, number) of the port each replica of ``rtype`` serves on, if any."""
        return None

    def pod_spec(self, job: Mapping[str, Any], rtype: core.ReplicaType, variant: str) -> Body:
        return copy.deepcopy(dict(rtype.template.get("spec") or {}))

    def pod(self, job: Mapping[str, Any], rtype: core.ReplicaType, index: int, variant: str,
            gang: Gang | None) -> Body:
        meta = job["metadata"]
        template_meta = rtype.template.get("metadata") or {}
        spec = self.pod_spec(job, rtype, variant)
        spec["restartPolicy"] = "Never"  # the controller restarts replicas (see core)
        world = self.world(job)
        containers = spec.get("containers") or []
        port = self.port(job, rtype.name)
        for i, container in enumerate(containers):
            if container.get("name") == self.container or len(containers) == 1:
                for field in ("env", "ports"):  # the two lists the controller adds to
                    if not isinstance(container.get(field) or [], list):
                        raise TypeError(f"{rtype.name}: template.spec.containers[{i}].{field} "
                                        "is not a list")
                container["env"] = [*(container.get("env") or []),
                                    *self.env(job, rtype.name, index, world)]
                if port is not None:
                    _ensure_port(container, *port)
        name = self.pod_name(meta["name"], rtype.name, index)
        spec.setdefault("hostname", name)
        annotations = dict(template_meta.get("annotations") or {})
        if variant:
            annotations[protocol.RUN_VARIANT] = variant
        pod: Body = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": meta["namespace"],
                "labels": {**(template_meta.get("labels") or {}),
                           **self.labels(job, rtype.name, index)},
                "annotations": annotations, "ownerReferences": [owner(job)],
            },
            "spec": spec,
        }
        if gang is not None:
            gang.decorate(pod, rtype.label)
        return pod

    def service(self, job: Mapping[str, Any], rtype: str, index: int) -> Body | None:
        port = self.port(job, rtype)
        if port is None:
            return None
        meta = job["metadata"]
        labels = self.labels(job, rtype, index)
        return {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.pod_name(meta["name"], rtype, index),
                         "namespace": meta["namespace"], "labels": labels,
                         "ownerReferences": [owner(job)]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {k: labels[k] for k in (self.job_label, self.type_label,
                                                         self.index_label)},
                     "ports": [{"name": port[0], "port": port[1]}]},
        }

    # -- status --------------------------------------------------------------------------
    def restarts_so_far(self, status: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def status(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
               result: core.Plan, pods: Sequence[core.ObservedPod], mode: RunMode,
               observed: Observed, now: str) -> Body:
        raise NotImplementedError

    def finished(self, status: Mapping[str, Any]) -> bool:
        return self.description.finished(status)

    def failed(self, status: Mapping[str, Any]) -> bool:
        return self.description.failed(status)

    def fail(self, job: Mapping[str, Any], status: Body, reason: str, message: str,
             now: str) -> Body:
        """``status`` turned into a failure (deadline exceeded)."""
        raise NotImplementedError


def owner(job: Mapping[str, Any]) -> Body:
    meta = job["metadata"]
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


def _ensure_port(container: Body, name: str, port: int) -> None:
    ports = container.setdefault("ports", [])
    if not any(p.get("name") == name for p in ports):
        ports.append({"name": name, "containerPort": port, "protocol": "TCP"})
