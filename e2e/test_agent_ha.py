"""The agent's resilience: a standby agent takes over a member without duplicating anything,
and a member keeps running its jobs while the hub is cut off, then catches the hub up."""

from __future__ import annotations

import datetime
import signal
import time
from typing import Any

import pytest

from e2e.conftest import eventually
from e2e.jobs import gang_namespace, hub_state, pods, pods_named, seed_pytorchjob
from e2e.localfleet import HUB, LocalFleet
from fleet.clients import resources as r
from fleet.clients.kube import Kube

pytestmark = pytest.mark.e2e
Body = dict[str, Any]
NS = "agent-ha"


@pytest.fixture(scope="module")
def on_member2(hub: Kube) -> str:
    """A namespace whose jobs the policy sends to member2."""
    gang_namespace(hub, NS, cluster="member2")
    return NS


def holder(member: Kube) -> str:
    lease = member.get_or_none(r.LEASES, "fleet-agent", "fleet-system")
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def restarted(member: Kube, pod: str) -> bool:
    body = member.get(r.PODS, pod, "fleet-system")
    return any(c.get("restartCount", 0) > 0 and c.get("ready")
               for c in body["status"].get("containerStatuses", []))


def renewed_after(member: Kube, moment: datetime.datetime) -> bool:
    lease = member.get(r.LEASES, "fleet-agent", "fleet-system")
    renewed = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    return renewed > moment


def test_a_standby_agent_takes_over_without_duplicates(fleet: LocalFleet, hub: Kube,
                                                      on_member2: str) -> None:
    member = fleet.client("member2")
    first = eventually(lambda: holder(member), what="member2's agent lease held")
    # The standby is a host process beside the member's own agent (its DaemonSet Pod, or a
    # host process without real nodes): this test must SIGKILL an agent and start it again.
    fleet.start_agent("member2", instance="standby")
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("ha-run", NS, run_for="1h", gpus=1))
    running = pods_named(member, job, 3)
    eventually(lambda: all(p["status"].get("phase") == "Running" for p in pods(member, job)
                           .values()), what="ha-run running")
    before = {name: p["metadata"]["uid"] for name, p in running.items()}
    started = time.monotonic()
    standby = f"-{fleet.pid('agent-member2-standby')}"  # how its lease identity ends
    killed_standby = first.endswith(standby)
    if killed_standby:  # the member's own agent had lost the lease meanwhile
        fleet.stop_process("agent-member2-standby", signal.SIGKILL)
    elif fleet.runs_pods:  # the lease holder's identity is its Pod's name
        fleet.kill_container("member2", first, signal.SIGKILL)
    else:
        fleet.stop_process("agent-member2", signal.SIGKILL)

    killed_at = datetime.datetime.now(datetime.UTC)

    def successor() -> str | None:
        now = holder(member)
        if now and now != first:
            return now
        # A Pod's identity is its name: the kubelet's restart of the killed container may
        # take its own lease back before the standby does (it knows the old one is dead).
        if now == first and fleet.runs_pods and not killed_standby and restarted(
                member, first) and renewed_after(member, killed_at):
            return f"{now} (restarted)"
        return None

    second = eventually(successor, timeout=30, what="a live agent holding the lease")
    takeover = time.monotonic() - started
    print(f"agent takeover after SIGKILL: {takeover:.1f}s by {second} (lease 6s)")
    time.sleep(3)  # the new leader reconciles every job it has seen
    after = {name: p["metadata"]["uid"] for name, p in pods(member, job).items()}
    assert after == before, "pods were re-created or duplicated by the new leader"
    # The new leader acts: a job deleted on the hub is purged from the member.
    hub.delete(r.PYTORCHJOBS, "ha-run", NS)
    eventually(lambda: member.get_or_none(r.PYTORCHJOBS, "ha-run", NS) is None,
               what="the new leader purging the deleted job")
    # Leave member2 as the other tests found it: its own agent (the kubelet restarted a
    # killed Pod's container) leading, no standby.
    if not killed_standby and not fleet.runs_pods:
        fleet.start_agent("member2")
    fleet.stop_process("agent-member2-standby")
    eventually(lambda: holder(member) and not holder(member).endswith(standby), timeout=60,
               what="member2's own agent leading again")


def test_jobs_run_on_while_the_hub_is_cut_off_and_status_catches_up(
        fleet: LocalFleet, hub: Kube, on_member2: str) -> None:
    member = fleet.client("member2")
    job = hub.create(r.PYTORCHJOBS, seed_pytorchjob("cut-off", NS, run_for="6s", gpus=1))
    hub_state(hub, job, "Running")
    fleet.kill_component(HUB, sig=signal.SIGSTOP)
    try:
        def finished_on_member() -> bool:
            body = member.get_or_none(r.PYTORCHJOBS, "cut-off", NS) or {}
            return any(c["type"] == "Succeeded" and c["status"] == "True"
                       for c in (body.get("status") or {}).get("conditions") or [])
        eventually(finished_on_member, timeout=60,
                   what="the member finishing the job while the hub is frozen")
        time.sleep(2)
    finally:
        fleet.kill_component(HUB, sig=signal.SIGCONT)
    thawed = time.monotonic()
    hub_state(hub, job, "Succeeded", timeout=60)
    print(f"hub caught up {time.monotonic() - thawed:.1f}s after the hub came back")
