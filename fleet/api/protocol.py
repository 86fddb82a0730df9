"""The hub↔agent protocol: every name the hub and the member agents exchange, in one place.

The hub records a job's placement on the job itself, writes one Work per member cluster
(``fleet.sh/v1alpha1``, modelled in :mod:`fleet.api.cluster`) into the member's hub namespace,
and puts into each Work the member copy of the job, marked with where it belongs. The agent
applies the copy, runs it while its Work lasts (fencing: invariant 6) and reports back in the
Work's status. Both programs import the names and the small readers and writers below, so
neither spells the protocol on its own.

Pure: no I/O, no clock; stdlib only (an import-linter contract keeps it so).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

Body = dict[str, Any]

GROUP = "fleet.sh"
API_VERSION = f"{GROUP}/v1alpha1"
MEMBER_NAMESPACE_PREFIX = "fleet-member-"  # a member's namespace on the hub: its Works
JOB_WEBHOOK = "job"  # the hub's webhook for jobs: its handler id, and its path on the server
RUNTIME_WEBHOOK = "trainjob-runtime"  # the mutating one that snapshots a TrainJob's runtime

# -- on a hub job: the hub's bookkeeping (none of it reaches a member copy) -----------------
PLACEMENT = f"{GROUP}/placement"  # the shares of the bind, as encode_placement writes them
CLUSTERS = f"{GROUP}/clusters"  # the bound clusters, comma-separated (for people and kubectl)
FINALIZER = f"{GROUP}/dispatch"  # held while the job has Works
ADMITTED_AT = f"{GROUP}/admitted-at"  # admitted through a queue: it holds quota while bound
ADMITTED_BY = f"{GROUP}/admitted-by"  # the quota leaf that admitted it ("root/team-a")
# On every object the hub leader changes (a job's marks, a Work): the leader's term, which
# the API server compares with the hub's Lease (the fleet-leader-term admission policy).
TERM = f"{GROUP}/term"
REQUEUE = f"{GROUP}/requeue"  # going back to its queue (preempted, failed over): the reason
# When a job that ran was sent back to its queue (until it is bound again): its queue's
# starvation count starts there, not at its creation (quota.engine.Job.waiting_since).
REQUEUED_AT = f"{GROUP}/requeued-at"
FAILOVER_SINCE = f"{GROUP}/failover-since"
# The clusters a job failed over from: its next placement avoids them (as Karmada's scheduler
# avoids a cluster its binding is being evicted from); cleared by the next bind.
FAILOVER_AVOID = f"{GROUP}/failover-avoid"
# Fencing (invariant 6). Every bind of a job raises its placement generation by one. The hub
# keeps it on the job (this annotation, written by the bind, which is guarded by the job's
# resourceVersion, so it only ever grows); each Work carries it (``spec.placement.generation``)
# and the member copy the agent applies carries it (this annotation). An agent runs a member
# job only while a Work of its generation exists in its hub namespace, and removes it otherwise.
PLACEMENT_GENERATION = f"{GROUP}/placement-generation"
# What removing a Work does to its member copy (a PropagationPolicy's purge mode): on the
# Work (the hub sets it when it fails the job over or deletes it), else on the member copy.
PURGE_MODE = f"{GROUP}/purge-mode"
PURGE_IMMEDIATELY, PURGE_GRACIOUSLY, PURGE_NEVER = "Immediately", "Graciously", "Never"
# The job that preempted this one (a bound job's victim): kept until it is bound again, and
# while it is there the job preempts nobody itself (no cascades).
PREEMPTED_BY = f"{GROUP}/preempted-by"
# Topology-aware placement (Kueue's podset-required/preferred-topology, HiveD's cells): the
# node label of the topology level a job's gang must (or should) pack within on each member,
# e.g. a rack. Read by :func:`topology_request`; an invalid value keeps the job waiting with
# a condition naming the annotation.
TOPOLOGY_REQUIRED = f"{GROUP}/podset-required-topology"
TOPOLOGY_PREFERRED = f"{GROUP}/podset-preferred-topology"
# On a replica's pod template, these (or Kueue's own keys) ask the same of that role's
# replicas only, as Kueue reads them on each pod set; read by :func:`role_topology_request`.
KUEUE_TOPOLOGY_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_TOPOLOGY_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
_JOB_TOPOLOGY = ((TOPOLOGY_REQUIRED, True), (TOPOLOGY_PREFERRED, False))
_ROLE_TOPOLOGY = (*_JOB_TOPOLOGY, (KUEUE_TOPOLOGY_REQUIRED, True),
                  (KUEUE_TOPOLOGY_PREFERRED, False))
# An elastic job's last resize (grown or shrunk in place): {"reason", "message", "time"}.
RESIZED = f"{GROUP}/resized"
# -- on a hub job, set by its user -----------------------------------------------------------
# How long the job is expected to run once started: seconds ("600") or a number with a unit
# ("90s", "10m", "2h", "1d"), 1 s to ten years. With it (or runPolicy.activeDeadlineSeconds)
# the job may backfill: run before a reserved gang when it ends before that gang could start.
EXPECTED_RUNTIME = f"{GROUP}/expected-runtime"
MAX_EXPECTED_RUNTIME = 10 * 365 * 24 * 3600  # as every other time a user gives (limits)
# A job whose reservation was rolled back is not placed again before this time (seconds since
# the epoch, as text): a member that keeps refusing is not asked again on every pass.
RESERVE_RETRY_AT = f"{GROUP}/reserve-retry-at"
# "true" on a job bound in reservation mode: its Works start in phase Reserve (a Work the
# hub completes after a restart too, unless the placement was committed already).
RESERVED_PLACEMENT = f"{GROUP}/reserved-placement"
# Whose nodes the job's pods keep to, set by its bind (HiveD's cells, node by node): the quota
# leaf that admitted it ("root/team-a"), or "opportunistic" for an opportunistic job. Its Works
# carry it as a label value (``spec.placement.tenant``); the agent labels the job's pods with
# it (this key) and gives them a preferred pod anti-affinity to other tenants' pods, so that a
# node holds one tenant's pods where it can: what a reclaim or a preemption frees is then
# whole nodes, and one tenant's small jobs do not break up the nodes another's guarantee needs.
TENANT = f"{GROUP}/tenant"
# A TrainJob: the runtime it was made from (JSON: kind, name, spec), stamped by the hub's
# webhook at creation, as Trainer v2.3 snapshots it (KEP-2599); its Works carry the JobSet
# resolved from it, so members never need the runtime.
RUNTIME = f"{GROUP}/runtime"
# The annotations above that stay on the hub job: its member copies never carry them.
HUB_ONLY = (PLACEMENT, CLUSTERS, ADMITTED_AT, ADMITTED_BY, TERM, REQUEUE, REQUEUED_AT,
            FAILOVER_SINCE, FAILOVER_AVOID, PREEMPTED_BY, RESIZED, RESERVE_RETRY_AT,
            RESERVED_PLACEMENT, TENANT, RUNTIME)

# -- on a Work ------------------------------------------------------------------------------
# From the Work's creation: the member's agent removes it once it has taken the Work's
# objects off the member (the hub drops it itself for a member it has lost).
AGENT_FINALIZER = f"{GROUP}/agent"
JOB_GENERATION = f"{GROUP}/job-generation"  # the hub job's spec generation the Work renders
# When the hub sent the Work's create, to the microsecond (creationTimestamp has whole
# seconds): the agent times its "applied" stage from it (fleet_stage_seconds).
DISPATCHED_AT = f"{GROUP}/dispatched-at"
# When the Work's share was last resized (an elastic job): until its agent reports the share
# bound after that, the hub counts the share as not yet in the member's capacity report.
RESIZED_AT = f"{GROUP}/resized-at"
EVICT_AFTER = f"{GROUP}/evict-after"  # detached from the placement; deleted at this time
JOB_UID = f"{GROUP}/job-uid"  # label: the hub job's uid (on Works, member copies and pods)

# -- on a member copy ------------------------------------------------------------------------
WORK = f"{GROUP}/work"  # "<hub namespace>/<Work name>": the Work it was applied from
OFFSETS = f"{GROUP}/replica-offsets"  # a split gang: this share's first index per role
WORLD = f"{GROUP}/world"  # a split gang: every share of the placement (as PLACEMENT)
# A JobSet resolved from an MPI runtime: its slots per node and whether the launcher is a node
# too, from which its agent writes the hostfile (JSON).
MPI_HOSTS = f"{GROUP}/mpi-hosts"
# A JobSet resolved from a flux runtime: what its agent writes the Flux scripts from (JSON,
# fleet.kinds.flux.FluxPlan).
FLUX = f"{GROUP}/flux"
# A JobSet resolved from a TrainJob with ``activeDeadlineSeconds``: how long it may run once
# its pods start (again after a resume), as Trainer counts it.
ACTIVE_DEADLINE = f"{GROUP}/active-deadline-seconds"
# A kind whose spec cannot say a share's size (a JobSet's Jobs keep the whole gang's shape, for
# names and ranks): the pods per role of this share.
SHARE_REPLICAS = f"{GROUP}/share-replicas"
# On a split JobSet's member copy: its replicated jobs that reached Ready or Complete over every
# share, as the hub reads the shares' reports (JSON {name: "Ready"|"Complete"}): what a
# replicated job that depends on one waits for, as no agent sees the other members' pods.
PEERS_REACHED = f"{GROUP}/peers-reached"

# -- labels on other objects -----------------------------------------------------------------
CLUSTER_LABEL = f"{GROUP}/cluster"  # a member's namespace, MemberCluster and heartbeat Lease
AGENT_HEARTBEAT = f"{GROUP}/agent-heartbeat"  # label of the Lease each agent renews
HEARTBEAT_LEASE = "fleet-agent"  # its name, in the member's hub namespace
PROPAGATED_LABEL = f"{GROUP}/propagated"  # on member objects fleet made (and may replace)
# Mirror pods on the hub (fleet.hub.pod_mirrors): the annotation a policy or job turns them on
# with ("true"), and the label each mirror carries, naming the member that runs its pod.
MIRROR_PODS = f"{GROUP}/mirror-pods"
# On a PropagationPolicy: who runs its TrainJobs on a member. ``agent`` (the default): the
# agent, from the JobSet the hub resolved (no Trainer needed on the member); ``member-trainer``:
# the member's own Trainer v2 and JobSet controllers, from the TrainJob itself (and its
# runtime, as the hub snapshotted it); such a policy places each job whole on one member.
TRAINJOB_RUNNER = f"{GROUP}/trainjob-runner"
RUNNERS = ("agent", "member-trainer")
MIRROR_OF = f"{GROUP}/mirror-of"
QUOTA_TREE_LABEL = f"{GROUP}/quota-tree"  # a Queue the hub made for a quota tree's leaf
# On the hub's leader Lease (fleet-system/fleet-hub), set by the replica holding it: where its
# dashboard listens, as "<address>:<port>" inside the holder, and the holder's Pod as
# "<namespace>/<name>" when it runs in one (kubectl fleet dashboard port-forwards to it).
HUB_DASHBOARD = f"{GROUP}/dashboard"
HUB_POD = f"{GROUP}/pod"
HUB_LEASE = ("fleet-system", "fleet-hub")
# The agent's own marks on member objects it makes from a copy.
TENSORBOARD_FOR = f"{GROUP}/tensorboard-for"
RUN_VARIANT = f"{GROUP}/run-variant"  # how a pod was made: "", "debug", "resume"
RUN_ATTEMPT = f"{GROUP}/run-attempt"  # the whole job's attempt a pod was made for (absent: 0)

# -- reservations: two phases -------------------------------------------------------------
# A placement on members in reservation mode is written in two phases. The hub creates every
# Work in phase Reserve (``spec.placement.phase``): the agent applies the member copy but
# creates none of its pods; it holds the share's nodes with placeholder pods (one per replica,
# the replica's requests, the gang's priority) and reports the ``Reserved`` condition: True
# once every placeholder is bound to a node, False with reason Refused when the member's
# scheduler cannot place one (local workloads took the nodes). The hub moves every Work to
# phase Commit only when all of them are Reserved, and rolls all of them back (requeues the
# job) on one refusal or when the reservation deadline passes, so a split gang starts whole or
# not at all. In phase Commit the agent creates the real pods, each one on the node its slot's
# placeholder held, the placeholder deleted as its pod is created.
PHASE_RESERVE, PHASE_COMMIT = "Reserve", "Commit"  # "" (no phase): committed from the start
RESERVED = "Reserved"  # condition on a Work's status
RESERVING, REFUSED = "Reserving", "Refused"  # its reasons while False (True: RESERVED)
# Labels and annotations of a placeholder pod (with JOB_UID and, as an annotation, WORK).
PLACEHOLDER = f"{GROUP}/placeholder"  # label: "true"
PLACEHOLDER_ROLE = f"{GROUP}/placeholder-role"  # label: the lower-case replica type it holds for
PLACEHOLDER_INDEX = f"{GROUP}/placeholder-index"  # label: the replica index it holds for

# The node labels every agent reports on its node groups (besides its topology levels): the
# hub places a replica whose pod requires one of them (nodeSelector, required node affinity)
# only on nodes that carry it.
REPORTED_NODE_LABELS = ("nvidia.com/gpu.product", "topology.kubernetes.io/zone")

# -- topology levels a member reports (its agent's FLEET_TOPOLOGY_LEVELS, these by default) ----
HOSTNAME_LEVEL = "kubernetes.io/hostname"  # the node itself: a domain of one node
DEFAULT_TOPOLOGY_LEVELS = ("cloud.provider.com/topology-block",
                           "cloud.provider.com/topology-rack", HOSTNAME_LEVEL)
MAX_TOPOLOGY_LEVELS = 8
MAX_SHARE_DOMAINS = 64  # topology domains one share may name (a preferred gang's spread)
# A tenant's cells one share names (the nodes its pods prefer): past it, a tenant that owns
# more nodes of a member prefers a subset of them, still its own.
MAX_SHARE_CELLS = 64
MAX_TOPOLOGY_GROUPS = 2048  # node groups one capacity report holds at most
# A label value (and a label key's name): up to 63 characters, alphanumeric at both ends.
LABEL_VALUE_PATTERN = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# A label key: an optional DNS-subdomain prefix and "/", then a name.
_LABEL_KEY = re.compile(
    r"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?"
    + LABEL_VALUE_PATTERN)

# -- a Work's status, written by the agent ----------------------------------------------------
APPLIED = "Applied"  # condition: the copy is on the member
# Condition: the share's health; False counts toward application failover. Its reason says
# why; these reasons are member-side failures the hub also shows on the job as a
# ``ReplicaFailure`` condition and an event naming the member.
HEALTHY = "Healthy"
REPLICA_FAILURE = "ReplicaFailure"
MEMBER_FAILURE_REASONS = frozenset({
    "PriorityClassNotFound",  # the pod names a PriorityClass the member does not have
    "MemberQuotaExceeded",  # a ResourceQuota on the member refuses the pod
    "AdmissionDenied",  # an admission webhook or policy on the member refuses it
    "Forbidden",  # any other 403 on pod creation
    "Invalid",  # the member's API server finds the pod invalid (422, 400)
    "PodCreateRefused",  # another permanent refusal of the pod
    "ImagePullFailed",  # the member's nodes cannot pull the image
    "ContainerConfigInvalid",  # e.g. a missing ConfigMap or Secret the container needs
    "CrashLooping",  # a container keeps exiting and the kubelet backs off restarting it
})
# Healthy False for a cause the member lifts by itself: its agent retries, and the hub shows
# a ``Waiting`` condition (and an event) instead of a ReplicaFailure. It counts toward
# application failover all the same, so a share that stays refused moves where the policy
# lets it.
MEMBER_WAITING = "Waiting"
MEMBER_WAITING_REASONS = frozenset({
    "ServiceAccountNotReady",  # the namespace's account (or the job's) is not made yet
    "NamespaceNotReady",  # the namespace is being created or is terminating
    "MemberQuotaFull",  # a ResourceQuota is full now; the pod fits within its hard limit
    "MemberAdmissionUnavailable",  # an admission webhook cannot be called (failurePolicy Fail)
})


_RUNTIME = re.compile(r"([0-9]{1,12})([smhd]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def expected_runtime(meta: Mapping[str, Any]) -> int | None:
    """The EXPECTED_RUNTIME a job's metadata declares, in seconds; None without one.
    Raises ValueError naming the field when the value is malformed or out of bounds."""
    text = _annotations(meta).get(EXPECTED_RUNTIME)
    if text is None:
        return None
    field = f"metadata.annotations[{EXPECTED_RUNTIME}]"
    found = _RUNTIME.fullmatch(str(text).strip())
    if found is None:
        shown = str(text)[:40] + ("..." if len(str(text)) > 40 else "")
        raise ValueError(f"{field}: {shown!r} is not a duration; give seconds (600) or a "
                         "number with s, m, h or d (10m)")
    seconds = int(found.group(1)) * _UNIT_SECONDS[found.group(2)]
    if not 1 <= seconds <= MAX_EXPECTED_RUNTIME:
        raise ValueError(f"{field}: {text} is outside 1 s..{MAX_EXPECTED_RUNTIME} s (ten years)")
    return seconds


def member_namespace(cluster: str) -> str:
    return f"{MEMBER_NAMESPACE_PREFIX}{cluster}"


def cluster_of_namespace(namespace: str) -> str:
    """The member whose namespace on the hub ``namespace`` is ("" for any other)."""
    return namespace.removeprefix(MEMBER_NAMESPACE_PREFIX) \
        if namespace.startswith(MEMBER_NAMESPACE_PREFIX) else ""


def _annotations(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    return meta.get("annotations") or {}


# -- the placement ---------------------------------------------------------------------------
class Share(Protocol):
    """One cluster's share of a placement (``propagation.division.ClusterShare``)."""

    @property
    def cluster(self) -> str: ...
    @property
    def replicas(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def offsets(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def nodes(self) -> tuple[str, ...]: ...
    @property
    def copy(self) -> bool: ...
    @property
    def domains(self) -> tuple[tuple[tuple[str, str], ...], ...]: ...
    @property
    def role_domains(self) -> tuple[tuple[str, tuple[tuple[tuple[str, str], ...], ...]],
                                    ...]: ...
    @property
    def cells(self) -> tuple[str, ...]: ...


def placement_dicts(shares: Iterable[Share]) -> list[dict[str, Any]]:
    """The shares as the PLACEMENT text and the Works spell them: per share its cluster,
    replicas and offsets per role, the nodes it was packed onto, ``copy`` for a whole copy
    (Duplicated), and the topology domains it keeps to (each the node labels of one domain,
    top level first), the whole share's or per role (``roleDomains``), and its tenant's cells
    on the cluster (``cells``: node names its pods prefer)."""
    return [{"cluster": s.cluster, "replicas": dict(s.replicas), "offsets": dict(s.offsets),
             "nodes": list(s.nodes), **({"copy": True} if s.copy else {}),
             **({"domains": [dict(d) for d in s.domains]} if s.domains else {}),
             **({"roleDomains": {role: [dict(d) for d in domains]
                                 for role, domains in s.role_domains}}
                if s.role_domains else {}),
             **({"cells": list(s.cells)} if s.cells else {})}
            for s in shares]


def encode_placement(shares: Iterable[Share]) -> str:
    """The PLACEMENT (and WORLD) text (see ``placement_dicts``)."""
    return json.dumps(placement_dicts(shares), separators=(",", ":"))


def share_domains(share: Mapping[str, Any]) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The topology domains a decoded share (or a Work's placement) keeps to."""
    return _domains(share.get("domains"))


def share_role_domains(share: Mapping[str, Any]
                       ) -> tuple[tuple[str, tuple[tuple[tuple[str, str], ...], ...]], ...]:
    """Per role with a topology of its own, the domains a decoded share (or a Work's
    placement) keeps that role's pods to."""
    found = share.get("roleDomains")
    if not isinstance(found, Mapping):
        return ()
    return tuple((str(role), _domains(domains)) for role, domains in found.items())


def _domains(found: Any) -> tuple[tuple[tuple[str, str], ...], ...]:
    return tuple(tuple((str(k), str(v)) for k, v in domain.items()) for domain in found or ())


# -- topology ----------------------------------------------------------------------------
_LABEL_VALUE = re.compile(LABEL_VALUE_PATTERN)


def tenant_label(tenant: str) -> str:
    """A tenant (see ``TENANT``) as a label value: a quota leaf's path with dots for its
    slashes ("root.team-a"), or, when that is no valid label value (too long), a digest of it
    that stays the same for the same tenant."""
    value = tenant.replace("/", ".")
    if not tenant or _LABEL_VALUE.fullmatch(value):
        return value
    return "t-" + hashlib.sha256(tenant.encode()).hexdigest()[:40]


def label_key_error(key: str) -> str:
    """Why ``key`` is not a valid node label key ("" when it is)."""
    if not isinstance(key, str) or not key:
        return "must be a node label key, e.g. cloud.provider.com/topology-rack"
    prefix, _, name = key.rpartition("/")
    if len(prefix) > 253 or len(name) > 63 or not _LABEL_KEY.fullmatch(key):
        shown = key if len(key) <= 80 else f"{key[:80]}..."
        return f"{shown!r} is not a node label key (an optional DNS prefix and '/', then a " \
               "name of at most 63 letters, digits, '-', '_' or '.')"
    return ""


def topology_request(meta: Mapping[str, Any], where: str = "metadata",
                     keys: tuple[tuple[str, bool], ...] = _JOB_TOPOLOGY
                     ) -> tuple[str, bool] | None:
    """The topology level (a node label key) a job's gang packs within, and whether that is
    required (else preferred); None when the job asks for none. Raises ValueError naming the
    annotation (under ``where``) for a value that is not a label key, or when more than one
    is set."""
    annotations = _annotations(meta)
    found = [(key, annotations[key], required) for key, required in keys if key in annotations]
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(f"{where}.annotations[{found[0][0]}] and [{found[1][0]}]: set one "
                         "of them, not both")
    key, level, required = found[0]
    error = label_key_error(level)
    if error:
        raise ValueError(f"{where}.annotations[{key}]: {error}")
    return str(level), required


def role_topology_request(template: Mapping[str, Any], where: str) -> tuple[str, bool] | None:
    """:func:`topology_request` of one role's pod template (at ``where``), fleet's keys or
    Kueue's: that role's replicas pack within one domain of the level on each member."""
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    if not isinstance(meta.get("annotations") or {}, Mapping):
        raise ValueError(f"{where}.metadata.annotations: must be a map of strings")
    return topology_request(meta, f"{where}.metadata", _ROLE_TOPOLOGY)


def topology_levels(text: str | None) -> tuple[str, ...]:
    """The topology levels an agent reports, from its setting (comma-separated label keys,
    top level first); the defaults when unset. Raises ValueError for an invalid list."""
    if text is None or not text.strip():
        return DEFAULT_TOPOLOGY_LEVELS
    levels = tuple(part.strip() for part in text.split(",") if part.strip())
    if len(levels) > MAX_TOPOLOGY_LEVELS or len(set(levels)) != len(levels):
        raise ValueError(f"topology levels: at most {MAX_TOPOLOGY_LEVELS} distinct label "
                         f"keys, got {len(levels)}")
    for level in levels:
        error = label_key_error(level)
        if error:
            raise ValueError(f"topology levels: {error}")
    if HOSTNAME_LEVEL in levels[:-1]:
        raise ValueError(f"topology levels: {HOSTNAME_LEVEL} (one node) must be the last")
    return levels


def decode_placement(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The shares a bound job's PLACEMENT names; [] for a job not bound."""
    text = _annotations(job.get("metadata", {})).get(PLACEMENT)
    if not text:
        return []
    decoded: list[dict[str, Any]] = json.loads(text)
    return decoded


def placement_generation(meta: Mapping[str, Any]) -> int:
    """The placement generation in an object's annotations; 0 for objects placed before
    fencing existed (a Work without one carries 0 too, so they still match)."""
    text = _annotations(meta).get(PLACEMENT_GENERATION)
    try:
        return max(0, int(text)) if text is not None else 0
    except (TypeError, ValueError):
        return 0


def copy_marks(cluster: str, work: str, share: Mapping[str, Any],
               placement: Sequence[Mapping[str, Any]], generation: int) -> dict[str, str]:
    """The annotations the hub puts on the member copy of one share: its Work, its fence, and
    for a split gang (not a whole copy) its offsets and every share of the placement."""
    marks = {WORK: work_reference(member_namespace(cluster), work),
             PLACEMENT_GENERATION: str(generation)}
    if len(placement) > 1 and not share.get("copy"):
        marks[OFFSETS] = json.dumps(share["offsets"], separators=(",", ":"))
        marks[WORLD] = json.dumps(list(placement), separators=(",", ":"))
    return marks


def work_reference(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def copy_work(meta: Mapping[str, Any]) -> tuple[str, str]:
    """(hub namespace, Work name) a member copy was applied from; ("", "") for a job that
    was not."""
    namespace, _, name = str(_annotations(meta).get(WORK, "")).partition("/")
    return namespace, name


def replica_offsets(meta: Mapping[str, Any]) -> dict[str, int]:
    """A member copy's first replica index per role ({} unless the gang is split)."""
    offsets: dict[str, int] = json.loads(_annotations(meta).get(OFFSETS) or "{}")
    return offsets


def share_replicas(meta: Mapping[str, Any]) -> dict[str, int] | None:
    """A member copy's pods per role, when its kind records them apart (None otherwise)."""
    text = _annotations(meta).get(SHARE_REPLICAS)
    if not text:
        return None
    counts: dict[str, int] = json.loads(text)
    return counts


def world_text(meta: Mapping[str, Any]) -> str:
    """A split copy's WORLD as written ("" unless the gang is split)."""
    return str(_annotations(meta).get(WORLD) or "")


def share_indices(share: Mapping[str, Any], role: str) -> range:
    """The replica indices of ``role`` a decoded share of a placement holds."""
    start = int((share.get("offsets") or {}).get(role, 0))
    return range(start, start + int((share.get("replicas") or {}).get(role, 0)))


def world(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every share of a split copy's placement ([] unless the gang is split)."""
    shares: list[dict[str, Any]] = json.loads(world_text(meta) or "[]")
    return shares


# -- Works -----------------------------------------------------------------------------------
def work_generation(work: Mapping[str, Any]) -> int:
    """The placement generation a Work carries (its fence)."""
    return int(((work.get("spec") or {}).get("placement") or {}).get("generation") or 0)


def work_phase(work: Mapping[str, Any]) -> str:
    """The Work's reservation phase: PHASE_RESERVE, PHASE_COMMIT, or "" (no reservation)."""
    return str(((work.get("spec") or {}).get("placement") or {}).get("phase") or "")


def reservation(work: Mapping[str, Any]) -> tuple[str, str]:
    """(RESERVED, RESERVING or REFUSED, the agent's message) as the Work's status says;
    ("", "") before the agent reported on a reservation."""
    for condition in (work.get("status") or {}).get("conditions") or []:
        if condition.get("type") == RESERVED:
            state = RESERVED if condition.get("status") == "True" \
                else str(condition.get("reason") or RESERVING)
            return state, str(condition.get("message") or "")
    return "", ""


def work_purge_mode(work: Mapping[str, Any]) -> str:
    """What removing the Work does to its member copy: the Work's own PURGE_MODE, else the
    one the member copy carries (the policy's); "" when neither says."""
    manifests = (work.get("spec") or {}).get("manifests") or [{}]
    return str(_annotations(work.get("metadata") or {}).get(PURGE_MODE)
               or _annotations(manifests[0].get("metadata") or {}).get(PURGE_MODE) or "")


def work_status(*, applied: bool, state: str, job_status: Mapping[str, Any] | None,
                pods: Sequence[Mapping[str, Any]], conditions: Sequence[Mapping[str, Any]],
                bound_time: str | None) -> Body:
    """A Work's status as the agent reports it (``WorkStatus``)."""
    status: Body = {"applied": applied, "state": state, "jobStatus": job_status or None,
                    "pods": list(pods), "conditions": list(conditions)}
    if bound_time is not None:
        status["boundTime"] = bound_time
    return status


def reported_job_status(work: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The member job's status a Work reports; None before the agent reported one."""
    status: Mapping[str, Any] | None = (work.get("status") or {}).get("jobStatus")
    return status or None


def bound_time(work: Mapping[str, Any]) -> str | None:
    """When the agent saw every pod of the Work's share bound to a node."""
    value = (work.get("status") or {}).get("boundTime")
    return str(value) if value else None


def is_applied(work: Mapping[str, Any]) -> bool:
    return bool((work.get("status") or {}).get("applied"))


SUCCEEDED = "Succeeded"  # the work_state of a share that ran to its end


def work_state(work: Mapping[str, Any], default: str = "Pending") -> str:
    """The member job's one-word state a Work reports (``default`` before any)."""
    return str((work.get("status") or {}).get("state") or default)


def reported_pods(work: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pods of the Work's share as the agent summarised them (``PodSummary``)."""
    pods: list[Mapping[str, Any]] = (work.get("status") or {}).get("pods") or []
    return pods


def queue_status(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """Where the hub says a waiting job stands (``status.queue``: name, position, reason,
    message), as the CLI and the dashboard read it."""
    return ((job.get("status") or {}).get("queue")) or {}


def waiting_text(queue: Mapping[str, Any], waited: str = "") -> str:
    """Why a job waits, in the words both the CLI and the dashboard use."""
    where = f" in queue {queue['name']} at position {queue.get('position', '?')}" \
        if queue.get("name") else ""
    reason = queue.get("reason") or "NotDecided"
    message = queue.get("message") or "the hub has not decided yet"
    return f"waits{where}{f' for {waited}' if waited else ''}: {reason}: {message}"


def bounded_name(name: str, limit: int, suffix: str = "") -> str:
    """``name`` + ``suffix`` as an object name of at most ``limit`` characters: too long, it is
    cut and a digest of the whole keeps it unique (and the same on every call)."""
    full = name + suffix
    if len(full) <= limit:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[:limit - 11 - len(suffix)].rstrip('-.')}-{digest}{suffix}"
