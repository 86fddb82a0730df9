"""kopf handlers of the agent, on its member cluster: they only record what they see and queue
the affected job for its controller. The hub is reached through the plain client and an
informer (:mod:`member_agent.works`)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

import kopf

from fleet import metrics
from fleet.api.protocol import TENSORBOARD_FOR, topology_levels
from fleet.clients import resources as r
from fleet.clients.kopf_storage import STARTUP_RETRY_SECONDS, watch_only
from fleet.clients.kube import Kube
from member_agent import kubelet_endpoint
from member_agent.controllers.placeholders import DEFAULT_IMAGE
from member_agent.controllers.runtime import (
    KINDS,
    JobController,
    WorkQueue,
    key_of,
)
from member_agent.election import AgentElection
from member_agent.reporter import Reporter
from member_agent.state import MemberState
from member_agent.works.sync import WorkSync

log = logging.getLogger(__name__)
STATE = MemberState()
QUEUE = WorkQueue()
CONTROLLERS: list[JobController] = []
ELECTIONS: list[AgentElection] = []
_STOP = threading.Event()
WORKERS = 4


def _job_handler(resource: r.Resource) -> None:
    async def handler(*, type: str, body: kopf.Body, **_: Any) -> None:
        key = key_of(body)
        STATE.stores.put_job(key, None if type == "DELETED" else body)
        if type == "DELETED":
            for controller in CONTROLLERS:
                controller.forget(body["metadata"]["uid"])
        QUEUE.add(key)

    handler.__name__ = f"on_{resource.plural}_{resource.group.split('.')[0]}"
    kopf.on.event(resource.group, resource.version, resource.plural)(handler)


for _kind in KINDS.values():
    _job_handler(_kind.resource)


@kopf.on.event(r.TRAINJOBS.group, r.TRAINJOBS.version, r.TRAINJOBS.plural)
def on_trainjobs(*, type: str, body: kopf.Body, **_: Any) -> None:
    """A TrainJob the member's own Trainer runs (fleet.sh/trainjob-runner: member-trainer):
    recorded for its Work's status, never reconciled here (no controller of the agent's
    runs it)."""
    STATE.stores.put_job(key_of(body), None if type == "DELETED" else body)


@kopf.on.event("", "v1", "pods")
async def on_pod(*, type: str, body: kopf.Body, **_: Any) -> None:
    key = STATE.put_pod(body, type == "DELETED")
    if key is not None:
        QUEUE.add(key)


@kopf.on.event("", "v1", "serviceaccounts")
async def on_service_account(*, type: str, body: kopf.Body, **_: Any) -> None:
    # a job whose pods waited for it (a new namespace's default account) goes on at once
    for key in STATE.stores.put_account(body, type == "DELETED"):
        QUEUE.add(key)


@kopf.on.event("apps", "v1", "deployments", labels={TENSORBOARD_FOR: kopf.PRESENT})
async def on_tensorboard(*, type: str, body: kopf.Body, **_: Any) -> None:
    key = STATE.stores.put_board(body, type == "DELETED")
    if key is not None:
        QUEUE.add(key)


@kopf.on.event("", "v1", "nodes")
async def on_node(*, type: str, body: kopf.Body, **_: Any) -> None:
    STATE.put_node(body, type == "DELETED")


@kopf.on.startup(backoff=STARTUP_RETRY_SECONDS)
def start(settings: kopf.OperatorSettings, **_: Any) -> None:
    watch_only(settings)
    settings.watching.server_timeout = 300
    cluster = os.environ["FLEET_CLUSTER_NAME"]
    # Ready once the member's nodes and pods are listed (below) and, while leading, the hub's
    # Works: a leader acts on both.
    metrics.ready_when("member-caches", STATE.synced.is_set)
    metrics.serve(int(os.environ.get("FLEET_METRICS_PORT", "0")))
    member = Kube(os.environ.get("KUBECONFIG"), pool=16)
    hub = Kube(os.environ["FLEET_HUB_KUBECONFIG"], pool=16)  # Work statuses side by side
    nodes = member.list(r.NODES)[0]
    pods = member.list(r.PODS)[0]
    for node in nodes:
        STATE.put_node(node, False)
    for pod in pods:
        STATE.put_pod(pod, False)
    STATE.synced.set()
    controller = JobController(member, STATE.stores, QUEUE)
    CONTROLLERS.append(controller)
    sync = WorkSync(hub, member, cluster, STATE,
                    fence_interval=float(os.environ.get("FLEET_FENCE_SWEEP_SECONDS", "2")),
                    placeholder_image=os.environ.get("FLEET_PLACEHOLDER_IMAGE")
                    or DEFAULT_IMAGE)
    controller.fence = sync.may_run
    controller.take_slot = sync.take_slot
    sync.wake = QUEUE.add
    reporter = Reporter(hub, member, cluster, STATE,
                        interval=float(os.environ.get("FLEET_HEARTBEAT_INTERVAL", "2")),
                        held=sync.held, topology_levels=_topology_levels())
    threads: list[tuple[str, Callable[[threading.Event], None]]] = [
        (f"controller-{i}", controller.run) for i in range(WORKERS)]
    threads += sync.threads()
    threads.append(("heartbeat", reporter.run))

    def lead() -> None:
        # Only the leader serves its pods' logs to the hub (and reports where).
        try:
            endpoint = kubelet_endpoint.from_environment(member, hub, os.environ)
        except (ValueError, OSError) as exc:  # the agent runs on; only logs on the hub miss
            log.error("no kubelet endpoint for the hub: %s", exc)
            endpoint = None
        if endpoint is not None:
            reporter.extra["kubeletEndpoint"] = {"address": endpoint.address,
                                                 "port": endpoint.port}
            threads.append(("kubelet-endpoint", endpoint.run))
        for name, target in threads:
            threading.Thread(target=target, args=(_STOP,), name=name, daemon=True).start()

    def abdicate() -> None:
        _STOP.set()
        os._exit(3)  # a fresh process comes back as a standby with clean state

    lease = int(os.environ.get("FLEET_AGENT_LEASE_SECONDS", "6"))
    election = AgentElection(member, cluster, lease_seconds=lease)
    ELECTIONS.append(election)
    metrics.ready_when("hub-works", lambda: not election.elector.leading
                       or sync.synced.is_set())
    threading.Thread(target=election.run, args=(_STOP, lead, abdicate), name="election",
                     daemon=True).start()
    log.info("agent for %s started; waiting for the member's agent lease", cluster)


def _topology_levels() -> tuple[str, ...]:
    """FLEET_TOPOLOGY_LEVELS (comma-separated node label keys, top level first), else the
    defaults; an invalid setting is logged and the defaults are reported."""
    try:
        return topology_levels(os.environ.get("FLEET_TOPOLOGY_LEVELS"))
    except ValueError as exc:
        log.error("FLEET_TOPOLOGY_LEVELS: %s; reporting the default levels", exc)
        return topology_levels(None)


@kopf.on.cleanup()
def stop(**_: Any) -> None:
    _STOP.set()
    for election in ELECTIONS:
        election.elector.release()
