"""What the dashboard's page reads from the hub: one JSON document per view.

The page (``static/app.js``) and :mod:`fleet.hub.dashboard.pages` both follow these shapes;
keys are camelCase, as the Kubernetes objects the page shows beside them.
"""

from __future__ import annotations

from typing import TypedDict


class Amounts(TypedDict):
    """One resource on a member or a shape: everything, what is free, used and held."""

    total: int
    free: int
    used: int
    held: int  # reserved for a job whose placement is not committed yet


class Room(TypedDict):
    """One resource on the nodes of a shape: all of it, and what is free (the agent reports
    what is held for Works per member, not per shape)."""

    total: int
    free: int


class Condition(TypedDict):
    type: str
    status: str
    reason: str
    message: str


class Shape(TypedDict):
    """Nodes of one kind on a member: the same GPU model and allocatable amounts."""

    name: str  # "A100 ×8", "cpu-only"
    gpuModel: str
    nodes: int
    gpusPerNode: int
    gpus: Room
    cpu: Room  # millicores
    memory: Room  # bytes


class Member(TypedDict):
    name: str
    ready: bool
    stale: bool  # its agent is silent, or its capacity report too old to place work on
    reason: str  # why not ready or stale ("" when neither)
    heartbeatAgeSeconds: float | None  # since the hub last heard its agent (hub's clock)
    shapes: list[Shape]
    gpus: Amounts
    cells: dict[str, int]  # quota queue -> nodes its guarantee owns here
    works: int  # job shares placed here
    conditions: list[Condition]


class Members(TypedDict):
    members: list[Member]


class WaitingJob(TypedDict):
    position: int
    job: str  # "namespace/name"
    kind: str
    uid: str
    reason: str
    message: str
    waitedSeconds: float | None


class QueueNode(TypedDict):
    name: str  # the Queue object's name
    path: list[str]
    depth: int
    leaf: bool
    namespaces: list[str]
    min: dict[str, str]
    max: dict[str, str]
    used: dict[str, str]
    gpus: dict[str, int]  # min, max, used, borrowed (above min) in GPUs
    waitingCount: int
    waiting: list[WaitingJob]  # the first, in admission order


class Queues(TypedDict):
    tree: str  # "namespace/name" of the ElasticQuotaTree ("" without one)
    queues: list[QueueNode]


class JobRow(TypedDict):
    uid: str
    kind: str
    namespace: str
    name: str
    state: str
    queue: str
    position: int | None
    reason: str
    clusters: list[str]
    created: str


class Jobs(TypedDict):
    total: int  # matching the filter
    shown: int
    jobs: list[JobRow]
    states: dict[str, int]  # every job's state, counted (the filter's choices)


class Pod(TypedDict):
    name: str
    role: str
    node: str
    phase: str
    ready: bool
    restarts: int
    logs: str  # the command that prints its log


class Share(TypedDict):
    cluster: str
    work: str
    replicas: dict[str, int]
    applied: bool
    state: str
    pods: list[Pod]


class Moment(TypedDict):
    time: str
    what: str  # Created, Admitted, Bound, Dispatched, Running, Preempted, ...
    detail: str
    source: str  # "job", "work", "event"


class JobDetail(TypedDict):
    job: JobRow
    message: str
    shares: list[Share]
    timeline: list[Moment]
    conditions: list[Condition]


class Sample(TypedDict):
    at: str
    used: dict[str, int]  # queue -> GPUs in use
    waiting: dict[str, int]  # queue -> jobs waiting


class History(TypedDict):
    since: str  # the first sample kept: this replica's leadership, or the window's start
    stepSeconds: float
    capacity: int
    samples: list[Sample]


class Overview(TypedDict):
    leading: bool
    identity: str
    term: str
    at: str
    version: int
    members: int
    membersReady: int
    jobs: int
    waiting: int
    gpus: Amounts
