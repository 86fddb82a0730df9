"""Reservations held for real: placeholder pods, as pure decisions of observed state.

In reservation mode the hub writes a Work in phase Reserve first (``fleet.api.protocol``). The
agent then holds the share's nodes with one placeholder pod per replica: the pause image,
requesting exactly that replica's resources, at the gang's priority (the replica's
PriorityClass), with the replica's node selector, affinity and tolerations, and pinned to the
nodes the hub's division named. The member's own scheduler binds them, so from that moment no
local workload can take the capacity: the member's scheduler sees it used, and a local pod
of the same or lower priority cannot preempt a placeholder. The Work reports Reserved once
every placeholder is bound, Refused as soon as the scheduler finds one unschedulable.

On Commit each real pod takes its slot's place: the agent deletes the slot's placeholder
(grace period 0) and creates the real pod bound to the node the placeholder held. Why not
let the real pods preempt the placeholders: kube-scheduler preempts only pods of a strictly
lower priority, and placeholders must stand at the gang's priority, or a local pod of that
priority could preempt them during the reservation; a real pod of the same priority cannot
preempt them. Handing the slot over directly leaves one API round trip between the
placeholder's deletion and the real pod's bind, instead of a scheduling cycle per pod.

Placeholders carry the job's uid, their Work and their slot (role, index), and are owned by
the member copy (not as its controller: the job controller never counts them as replicas),
so they go with the copy; the agent's fencing sweep removes any whose Work is gone
(:func:`orphans`).

Pure: Works, pods and the member copy in; what to create and delete, and the verdict, out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api import protocol as p
from fleet.api.quantity import format_canonical
from fleet.kinds import adapter_for
from fleet.kinds.base import InvalidJob, pod_request
from member_agent.tenancy import keep_apart

Body = dict[str, Any]
Slot = tuple[str, int]  # (lower-case replica type, index)
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"
MAX_POD_NAME = 253
# What a placeholder copies from its replica's pod spec: where the replica may run, and at
# what priority. Nothing else (no volumes, no service account): it only holds capacity.
PLACEMENT_FIELDS = ("nodeSelector", "tolerations", "affinity", "schedulerName",
                    "priorityClassName", "runtimeClassName")


@dataclass(frozen=True)
class Verdict:
    state: str  # protocol.RESERVED, RESERVING or REFUSED
    message: str


@dataclass(frozen=True)
class HoldPlan:
    create: tuple[Body, ...] = ()
    delete: tuple[str, ...] = ()  # placeholder pod names (in the job's namespace)
    verdict: Verdict | None = None  # None: the Work has no reservation


def slots(work: Mapping[str, Any]) -> list[tuple[Slot, Mapping[str, Any]]]:
    """Every replica of the Work's share, with its pod template, in role order."""
    manifest = work["spec"]["manifests"][0]
    offsets = work["spec"]["placement"].get("offsets") or {}
    adapter = adapter_for(manifest["apiVersion"], manifest["kind"])
    out: list[tuple[Slot, Mapping[str, Any]]] = []
    for role in adapter.roles(manifest):
        start = int(offsets.get(role.name, 0))
        out += [((role.name.lower(), start + i), role.template) for i in range(role.replicas)]
    return out


def slot_of(pod: Mapping[str, Any]) -> Slot | None:
    labels = pod["metadata"].get("labels") or {}
    try:
        return str(labels[p.PLACEHOLDER_ROLE]), int(labels[p.PLACEHOLDER_INDEX])
    except (KeyError, ValueError):
        return None


def is_placeholder(pod: Mapping[str, Any]) -> bool:
    return (pod["metadata"].get("labels") or {}).get(p.PLACEHOLDER) == "true"


def placeholder_name(job: str, slot: Slot) -> str:
    return p.bounded_name(f"{job}-{slot[0]}-{slot[1]}", MAX_POD_NAME, "-hold")


def placeholder(work: Mapping[str, Any], slot: Slot, template: Mapping[str, Any],
                owner: Mapping[str, Any] | None, image: str = DEFAULT_IMAGE) -> Body:
    """The pod that holds ``slot``'s capacity until its real pod replaces it."""
    manifest = work["spec"]["manifests"][0]
    meta = manifest["metadata"]
    spec = template.get("spec") or {}
    request = pod_request(template)
    amounts = {name: format_canonical(name, amount) for name, amount in request.items()}
    held: Body = {key: copy.deepcopy(spec[key]) for key in PLACEMENT_FIELDS if spec.get(key)}
    nodes = list(work["spec"]["placement"].get("nodes") or [])
    if nodes:
        held["affinity"] = _pinned(held.get("affinity") or {}, nodes)
    held.update({
        "containers": [{"name": "hold", "image": image, "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": amounts, "limits": amounts}}],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
    })
    pod: Body = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": placeholder_name(meta["name"], slot),
            "namespace": meta["namespace"],
            "labels": {p.PLACEHOLDER: "true", p.JOB_UID: work["spec"]["job"]["uid"],
                       p.PLACEHOLDER_ROLE: slot[0], p.PLACEHOLDER_INDEX: str(slot[1])},
            "annotations": {p.WORK: p.work_reference(work["metadata"]["namespace"],
                                                     work["metadata"]["name"])},
            **({"ownerReferences": [dict(owner)]} if owner else {}),
        },
        "spec": held,
    }
    tenant = str(work["spec"]["placement"].get("tenant") or "")
    if tenant:  # it holds the nodes for its tenant: other tenants' pods keep away as well
        keep_apart(pod, tenant)
    return pod


def _pinned(affinity: Mapping[str, Any], nodes: Sequence[str]) -> Body:
    """``affinity`` with every required node term also requiring one of ``nodes``: a node
    field selector takes one value, so one term per node (terms are ORed) and per term the
    replica had."""
    node = dict(affinity.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    required["nodeSelectorTerms"] = [
        {**term, "matchFields": [*(term.get("matchFields") or []),
                                 {"key": "metadata.name", "operator": "In", "values": [name]}]}
        for term in terms for name in sorted(nodes)]
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    return {**affinity, "nodeAffinity": node}


def unschedulable(pod: Mapping[str, Any]) -> str:
    """The scheduler's word when it cannot place ``pod`` ("" while it can or has not said),
    or why a placeholder once bound no longer holds its node."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Failed", "Succeeded"):
        return f"evicted from {pod.get('spec', {}).get('nodeName') or 'its node'}: " \
               f"{status.get('reason') or status.get('phase')}"
    if status.get("nominatedNodeName"):
        return ""  # it preempts lower-priority pods there: placed once they are gone
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" \
                and condition.get("reason") == "Unschedulable":
            return str(condition.get("message") or "unschedulable")
    return ""


def plan(work: Mapping[str, Any], held: Sequence[Mapping[str, Any]],
         real: Iterable[Slot], owner: Mapping[str, Any] | None,
         image: str = DEFAULT_IMAGE) -> HoldPlan:
    """What to do with one Work's placeholders (``held``: the pods holding its slots now;
    ``real``: the slots whose real pod exists).

    Reserve: a placeholder for every slot; Reserved once all are bound, Refused as soon as
    one cannot be placed. Commit: each slot's placeholder goes once its real pod exists.
    No phase, or a Work being deleted: every placeholder goes."""
    phase = p.work_phase(work)
    by_slot: dict[Slot, Mapping[str, Any]] = {}
    extra: list[str] = []
    for pod in sorted(held, key=lambda x: x["metadata"]["name"]):
        slot = slot_of(pod)
        if slot is None or slot in by_slot or pod["metadata"].get("deletionTimestamp"):
            if not pod["metadata"].get("deletionTimestamp"):
                extra.append(pod["metadata"]["name"])
            continue
        by_slot[slot] = pod
    everything = tuple(sorted([*extra, *(x["metadata"]["name"] for x in by_slot.values())]))
    if not phase or work["metadata"].get("deletionTimestamp"):
        return HoldPlan(delete=everything)
    try:
        wanted = slots(work)
    except InvalidJob as exc:  # the job controller says so on the job; nothing is held
        return HoldPlan(delete=everything, verdict=Verdict(p.REFUSED, f"share unreadable: {exc}"))
    known = {slot for slot, _ in wanted}
    extra += [x["metadata"]["name"] for s, x in by_slot.items() if s not in known]
    if phase == p.PHASE_COMMIT:
        started = set(real)
        done = [by_slot[s]["metadata"]["name"] for s in sorted(started & set(by_slot))]
        return HoldPlan(delete=tuple(sorted([*extra, *done])),
                        verdict=Verdict(p.RESERVED, "committed: the job's pods take the "
                                                    "placeholders' places"))
    # Made once the member copy exists (they are owned by it, so they go with it).
    create = () if owner is None else tuple(placeholder(work, slot, template, owner, image)
                                            for slot, template in wanted if slot not in by_slot)
    refused = sorted((x["metadata"]["name"], why) for s, x in by_slot.items()
                     if s in known and (why := unschedulable(x)))
    bound = sorted({str(by_slot[s]["spec"]["nodeName"]) for s in known
                    if s in by_slot and (by_slot[s].get("spec") or {}).get("nodeName")
                    and not unschedulable(by_slot[s])})
    count = sum(1 for s in known if s in by_slot and by_slot[s].get("spec", {}).get("nodeName")
                and not unschedulable(by_slot[s]))
    if refused:
        name, why = refused[0]
        verdict = Verdict(p.REFUSED, f"placeholder {name} cannot be placed: {why}")
    elif count == len(wanted):
        verdict = Verdict(p.RESERVED, f"{count} placeholders hold {', '.join(bound)}")
    else:
        verdict = Verdict(p.RESERVING, f"{count} of {len(wanted)} placeholders bound")
    return HoldPlan(create, tuple(sorted(extra)), verdict)


def pinned_node(held: Sequence[Mapping[str, Any]], slot: Slot) -> tuple[str, str] | None:
    """(node, placeholder name) of the bound placeholder holding ``slot``: its real pod goes
    there as the placeholder goes."""
    for pod in held:
        node = (pod.get("spec") or {}).get("nodeName")
        if slot_of(pod) == slot and node and not pod["metadata"].get("deletionTimestamp") \
                and not unschedulable(pod):
            return str(node), str(pod["metadata"]["name"])
    return None


def orphans(pods: Iterable[Mapping[str, Any]], namespace: str,
            works: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Placeholders (namespace, name, why) whose Work is gone: ``works`` maps the Work names
    in the agent's hub ``namespace`` to their job's uid. Sorted."""
    out = []
    for pod in pods:
        meta = pod["metadata"]
        if not is_placeholder(pod) or meta.get("deletionTimestamp"):
            continue
        owner, work = p.copy_work(meta)
        if owner != namespace:
            continue  # another fleet's agent placed it
        uid = (meta.get("labels") or {}).get(p.JOB_UID)
        if works.get(work) != uid:
            out.append((meta["namespace"], meta["name"],
                        f"its Work {work} is gone" if work not in works
                        else f"its Work {work} now belongs to another job"))
    return sorted(out)
