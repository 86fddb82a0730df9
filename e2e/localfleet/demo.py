"""The demo: the seed's gang policy and PyTorchJob, followed on the hub until Succeeded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from e2e.localfleet import HUB, REPO, LocalFleet, progress
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

EXAMPLES = REPO / "examples"


def apply_file(kube: Kube, path: Path, namespace: str = "default") -> list[dict[str, Any]]:
    applied = []
    for doc in yaml.safe_load_all(path.read_text()):
        if not doc:
            continue
        doc.setdefault("metadata", {})
        resource = r.for_kind(doc["apiVersion"], doc["kind"])
        if resource.namespaced:
            doc["metadata"].setdefault("namespace", namespace)
        applied.append(kube.apply(resource, doc, field_manager="kubectl-client-side-apply"))
    return applied


def binding_event(kube: Kube, job: dict[str, Any]) -> str:
    events, _ = kube.list(r.EVENTS, job["metadata"]["namespace"],
                          field_selector=f"involvedObject.uid={job['metadata']['uid']}")
    for event in events:
        if event.get("reason") == "ScheduleBindingSucceed":
            return str(event.get("message"))
    return ""


def run_demo(fleet: LocalFleet, timeout: float = 180) -> bool:
    hub = fleet.client(HUB)
    progress(f"applying {EXAMPLES.name}/propagationpolicy-gang.yaml and pytorchjob.yaml to the hub")
    apply_file(hub, EXAMPLES / "propagationpolicy-gang.yaml")
    job = apply_file(hub, EXAMPLES / "pytorchjob.yaml")[0]
    name = job["metadata"]["name"]
    deadline = time.monotonic() + timeout
    seen: set[str] = set()
    while time.monotonic() < deadline:
        try:
            job = hub.get(r.PYTORCHJOBS, name, "default")
        except errors.ApiError as exc:
            progress(f"hub not answering yet: {exc.reason}")
            time.sleep(1)
            continue
        status = job.get("status") or {}
        event = binding_event(hub, job)
        if event and "bound" not in seen:
            seen.add("bound")
            progress(f"event ScheduleBindingSucceed: {event}")
        for cluster in status.get("clusters") or []:
            member = fleet.client(cluster)
            pods, _ = member.list(r.PODS, "default",
                                  label_selector=f"training.kubeflow.org/job-name={name}")
            phases = sorted(f"{p['metadata']['name']}={(p.get('status') or {}).get('phase')}"
                            for p in pods)
            line = f"{cluster} pods: {', '.join(phases) or 'none yet'}"
            if line not in seen:
                seen.add(line)
                progress(line)
        conditions = [c["type"] for c in status.get("conditions") or []
                      if c.get("status") == "True"]
        state = conditions[-1] if conditions else "Pending"
        if f"state {state}" not in seen:
            seen.add(f"state {state}")
            progress(f"hub: pytorchjob/{name} STATE {state}")
        if "Succeeded" in conditions:
            return True
        if "Failed" in conditions:
            return False
        time.sleep(0.5)
    progress("timed out waiting for the job")
    return False


def show_status(fleet: LocalFleet) -> None:
    hub = fleet.client(HUB)
    clusters, _ = hub.list(r.MEMBERCLUSTERS)
    for cluster in clusters:
        status = cluster.get("status") or {}
        print(f"member {cluster['metadata']['name']}: heartbeat {status.get('lastHeartbeatTime')}"
              f", free GPUs {status.get('freeGpus')}, nodes {status.get('readyNodes')}")
    for resource in r.JOB_KINDS:
        jobs, _ = hub.list(resource)
        for job in jobs:
            conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []
                          if c.get("status") == "True"]
            print(f"{resource.kind} {job['metadata']['namespace']}/{job['metadata']['name']}: "
                  f"{conditions[-1] if conditions else (job.get('status') or {}).get('phase')}")
