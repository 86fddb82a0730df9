"""What every job kind shares: roles, per-replica requests, shares, and status rules."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.api import limits
from fleet.api.protocol import (
    HOSTNAME_LEVEL,
    REPORTED_NODE_LABELS,
    role_topology_request,
    topology_request,
)
from fleet.api.quantity import QuantityError, canonical
from fleet.clients.resources import Resource
from fleet.kinds.deps import t9k_references, template_references
from propagation.resources import Resources
from propagation.views import JobDemand, NodeLabelIn, Role, TopologyRequest

Body = dict[str, Any]


class InvalidJob(ValueError):
    """A job the hub cannot divide as it is (a count beyond its bound, a malformed field),
    e.g. stored under an older CRD. The message names the field; the hub shows it in the
    job's Queuing condition (reason ``Invalid``) instead of allocating from it."""


@dataclass(frozen=True)
class RoleSpec:
    name: str  # as the kind spells it: "Master", "worker"
    replicas: int
    template: Mapping[str, Any]
    leader: bool


def pod_request(template: Mapping[str, Any]) -> Resources:
    """A pod's effective request: the sum over containers (requests, else limits), or the
    largest init container if that is larger, as the Kubernetes scheduler counts it."""
    spec = template.get("spec") or {}

    def container_request(container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = {**limits, **(resources.get("requests") or {})}
        return {name: canonical(name, value) for name, value in requests.items()}

    total: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, amount in container_request(container).items():
            total[name] = total.get(name, 0) + amount
    for init in spec.get("initContainers") or []:
        for name, amount in container_request(init).items():
            total[name] = max(total.get(name, 0), amount)
    return Resources.of(total)


def node_requirements(template: Mapping[str, Any]) -> tuple[NodeLabelIn, ...]:
    """What a pod's ``nodeSelector`` and required node affinity ask of the node labels the
    members report (``REPORTED_NODE_LABELS``: the GPU model, the zone) and of the node's
    hostname (read as its name, which the members report and kubelet gives the label by
    default), so the hub places its replicas only on nodes that carry them, as the member's
    scheduler will. Other keys, and affinity that is not one term of ``In`` expressions
    (several terms are ORed), are left to the member's scheduler."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        return ()
    wanted: dict[str, set[str]] = {}

    def require(key: object, values: set[str]) -> None:
        if key in REPORTED_NODE_LABELS or key == HOSTNAME_LEVEL:
            wanted[str(key)] = wanted[str(key)] & values if key in wanted else values

    selector = spec.get("nodeSelector")
    for key, value in (selector.items() if isinstance(selector, Mapping) else ()):
        require(key, {str(value)})
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node, Mapping) else None
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    expressions = terms[0].get("matchExpressions") if isinstance(terms, list) and \
        len(terms) == 1 and isinstance(terms[0], Mapping) else None
    if isinstance(expressions, list):
        for expression in expressions:
            if isinstance(expression, Mapping) and expression.get("operator") == "In" and \
                    isinstance(expression.get("values"), list):
                require(expression.get("key"), {str(v) for v in expression["values"]})
    return tuple(NodeLabelIn(key, tuple(sorted(values))) for key, values in sorted(wanted.items()))


class KindAdapter:
    """Base adapter; subclasses say where the roles live in the spec and how status reads."""

    resource: Resource
    work_prefix: str  # how the names of the job's Works begin
    leaders: tuple[str, ...] = ()  # the roles that lead, in order of precedence
    fallback_leader = ""  # the role that leads when the job has none of ``leaders``
    terminal_states: tuple[str, ...] = ("Succeeded", "Failed")

    replicas_field = "spec"  # where the kind's replica specs live, for messages
    own_managers: tuple[str, ...] = ()  # managedBy values that leave the job to fleet
    runs_on_members = True  # False: its Works carry another kind (a TrainJob's JobSet)
    # Whether the hub may add conditions of its own (Queuing, Preempted): not to a kind whose
    # clients read its conditions as its state (the kubeflow SDK reads a TrainJob with any
    # condition as not running); those say why they wait in status.queue and events.
    fleet_conditions = True

    def role_path(self, role: str) -> str:
        """The field of one role's spec, as a message names it."""
        return f"{self.replicas_field}.{role}"

    def roles(self, body: Mapping[str, Any]) -> list[RoleSpec]:
        """The job's roles, their counts checked against the bounds the CRD states, so that
        nothing downstream expands a count it was never meant to see (raises InvalidJob)."""
        try:
            roles = self._roles(body)
        except InvalidJob:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidJob(f"{self.replicas_field}: cannot read the replica specs "
                             f"({type(exc).__name__}: {_short(exc)})") from None
        if len(roles) > limits.MAX_REPLICA_TYPES:
            raise InvalidJob(f"{self.replicas_field}: {len(roles)} replica types, more than "
                             f"{limits.MAX_REPLICA_TYPES}")
        for role in roles:
            if not 1 <= role.replicas <= limits.MAX_REPLICAS:
                raise InvalidJob(f"{self.role_path(role.name)}.replicas: "
                                 f"{_short(role.replicas)} is outside 1..{limits.MAX_REPLICAS}")
        total = sum(role.replicas for role in roles)
        if total > limits.MAX_JOB_REPLICAS:
            raise InvalidJob(f"{self.replicas_field}[*].replicas: {total} replicas in the job, "
                             f"more than {limits.MAX_JOB_REPLICAS}")
        return roles

    def replica_specs(self, body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        """(role, its replica spec) as the job states them: ``replicas`` (default 1),
        ``template`` and whatever else the kind's spec says of the role (restartPolicy)."""
        raise NotImplementedError

    def leader_role(self, roles: Sequence[str]) -> str:
        """The role whose replica 0 decides the job, among ``roles``."""
        return next((name for name in self.leaders if name in roles), self.fallback_leader)

    def is_leader(self, role: str, roles: Sequence[str]) -> bool:
        """Whether the hub keeps ``role``'s replica 0 with the job's leading share."""
        return role in self.leaders

    def _roles(self, body: Mapping[str, Any]) -> list[RoleSpec]:
        specs = self.replica_specs(body)
        names = [name for name, _ in specs]
        return [RoleSpec(name, int(spec.get("replicas", 1)), spec.get("template") or {},
                         self.is_leader(name, names)) for name, spec in specs]

    def demand(self, key: str, body: Mapping[str, Any]) -> JobDemand:
        out = []
        for role in self.roles(body):
            try:
                request = pod_request(role.template)
            except (QuantityError, TypeError, AttributeError) as exc:
                raise InvalidJob(f"{self.role_path(role.name)}.template: "
                                 f"{_short(exc)}") from None
            negative = sorted(name for name, amount in request.items() if amount < 0)
            if negative:
                raise InvalidJob(f"{self.role_path(role.name)}.template: negative "
                                 f"request of {', '.join(negative)}")
            try:
                own = role_topology_request(role.template, f"{self.role_path(role.name)}"
                                                           ".template")
            except ValueError as exc:
                raise InvalidJob(str(exc)) from None
            out.append(Role(role.name, role.replicas, request, role.leader,
                            node_requirements(role.template),
                            TopologyRequest(*own) if own is not None else None))
        try:
            topology = topology_request(body.get("metadata") or {})
        except ValueError as exc:
            raise InvalidJob(str(exc)) from None
        if topology is not None and any(role.topology for role in out):
            named = next(r.name for r in out if r.topology)
            raise InvalidJob(f"{self.role_path(named)}.template.metadata.annotations: a "
                             "topology of its own, while the job's metadata.annotations ask "
                             "one of the whole gang: set one or the other")
        return JobDemand(key, tuple(out),
                         TopologyRequest(*topology) if topology is not None else None)

    def with_replicas(self, body: Body, counts: Mapping[str, int]) -> Body:
        """A copy of ``body`` keeping only ``counts`` replicas of each role."""
        raise NotImplementedError

    def state(self, status: Mapping[str, Any] | None) -> str:
        """The one-word state printed for the job (the printer column's value)."""
        raise NotImplementedError

    def aggregate(self, body: Mapping[str, Any], works: Sequence[Mapping[str, Any]],
                  now: str) -> Body:
        """The hub job's status from its Works' reported statuses."""
        raise NotImplementedError

    def generated_secrets(self, body: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        """(name, kind of key: ``fleet.jobkeys``) of the Secrets whose keys the job's pods
        trust each other by, which its controller makes rather than the user."""
        return ()

    def dependencies(self, body: Mapping[str, Any]) -> set[tuple[str, str]]:
        """(kind, name) of the ConfigMaps, Secrets and PVCs the job's pods reference."""
        found: set[tuple[str, str]] = set()
        for role in self.roles(body):
            found |= template_references(role.template)
        return found | t9k_references(body)

    def ttl(self, body: Mapping[str, Any]) -> int | None:
        """Seconds after finishing when the job is deleted (Kubeflow's TTL), if set."""
        value = ((body.get("spec") or {}).get("runPolicy") or {}).get("ttlSecondsAfterFinished")
        return None if value is None else int(value)

    def active_deadline(self, body: Mapping[str, Any]) -> int | None:
        """``runPolicy.activeDeadlineSeconds`` (Kubeflow and T9k alike), if set: the longest
        the job runs once started. Checked against its bound (raises InvalidJob): the CRD
        states it, but an object stored under an older CRD never met it."""
        value = ((body.get("spec") or {}).get("runPolicy") or {}).get("activeDeadlineSeconds")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or \
                not 1 <= value <= limits.MAX_SECONDS:
            raise InvalidJob(f"spec.runPolicy.activeDeadlineSeconds: {_short(value)} is not a "
                             f"whole number of seconds in 1..{limits.MAX_SECONDS}")
        return value

    def is_finished(self, body: Mapping[str, Any]) -> bool:
        return self.finished(body.get("status"))

    def finished(self, status: Mapping[str, Any] | None) -> bool:
        """Whether a status (the hub job's or a member copy's) is final."""
        return self.state(status) in self.terminal_states

    def failed(self, status: Mapping[str, Any] | None) -> bool:
        return self.state(status) == "Failed"

    has_phase = False  # T9k jobs show a phase; Kubeflow jobs only conditions

    def managed_by(self, body: Mapping[str, Any]) -> str | None:
        """The controller the job names to run it (Kubeflow's ``runPolicy.managedBy``);
        None when it names none or the kind has no such field."""
        return None

    def gang_minimum(self, body: Mapping[str, Any]) -> int | None:
        """The pods the job says must start together (Kubeflow's
        ``schedulingPolicy.minAvailable``); None when it says nothing."""
        return None

    def for_member(self, body: Body) -> Body:
        """The member copy as the Work carries it (a kind may mark it for the member)."""
        return body

    def waiting_status(self, current: Mapping[str, Any] | None, reason: str, message: str,
                       now: str) -> Body:
        """The hub job's status while it waits: a Queuing condition that says why."""
        status: Body = {"conditions": [condition("Queuing", reason, message, now, current)],
                        "queue": {"reason": reason, "message": message}}
        if self.has_phase:
            status["phase"] = "Pending"
        return status

    def bound_status(self, current: Mapping[str, Any] | None, clusters: Sequence[str],
                     message: str, now: str) -> Body:
        status: Body = {"conditions": [condition("Created", "ScheduleBindingSucceed", message,
                                                 now, current)],
                        "clusters": list(clusters)}
        if self.has_phase:
            status["phase"] = "Pending"
        return status


def _short(value: object, size: int = 200) -> str:
    """A value or error as text short enough for a condition (it may be a 1 MiB string)."""
    text = str(value)
    return text if len(text) <= size else f"{text[:size]}... ({len(text)} characters)"


def condition(kind: str, reason: str, message: str, now: str,
              current: Mapping[str, Any] | None = None) -> Body:
    """A True condition; it keeps its transition time if ``current`` already has it True."""
    since = now
    for old in (current or {}).get("conditions") or []:
        if old.get("type") == kind and old.get("status") == "True":
            since = old.get("lastTransitionTime") or now
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": since, "lastUpdateTime": now}


def deep_copy(body: Mapping[str, Any]) -> Body:
    return copy.deepcopy(dict(body))
