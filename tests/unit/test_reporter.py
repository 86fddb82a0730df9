"""The agent's reports: a Lease every beat, the status only when it changes, and never an
empty map or list (server-side apply would send it as null, which the schema refuses)."""

from __future__ import annotations

from typing import Any

from fleet.clients.resources import Resource
from member_agent.held_nodes import HeldNodes
from member_agent.reporter import Reporter
from member_agent.state import MemberState

Body = dict[str, Any]


class Recorder:
    def __init__(self) -> None:
        self.applied: list[tuple[str, Body]] = []

    def apply(self, resource: Resource, body: Body, **_: Any) -> Body:
        self.applied.append((resource.plural, body))
        return body

    def raw(self, method: str, path: str) -> Body:
        return {"gitVersion": "v1.36.3"}


def empties(value: Any) -> list[str]:
    if isinstance(value, dict):
        return ["{}" for _ in [0] if not value] + [e for v in value.values() for e in empties(v)]
    if isinstance(value, list):
        return ["[]" for _ in [0] if not value] + [e for v in value for e in empties(v)]
    return []


def reporter(held: list[HeldNodes]) -> tuple[Reporter, Recorder]:
    state = MemberState()
    state.put_node({"metadata": {"name": "n1"},
                    "status": {"allocatable": {"cpu": "4", "nvidia.com/gpu": "1"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}, False)
    state.synced.set()
    hub = Recorder()
    return Reporter(hub, Recorder(), "m", state, min_gap=0, held=lambda pods, room: held), hub  # type: ignore[arg-type]


def test_status_goes_on_change_only_and_never_with_empty_fields() -> None:
    report, hub = reporter([])
    report.heartbeat()
    report.report()
    report.report()  # nothing changed: nothing sent
    kinds = [plural for plural, _ in hub.applied]
    assert kinds == ["leases", "memberclusters"]
    status = hub.applied[1][1]["status"]
    assert not empties(status)
    assert "reserved" not in status["capacity"]
    report.dirty = True
    report.sent_at = 0.0  # as if the minimum gap had passed
    report.held = lambda pods, room: [HeldNodes("w", ("n1",), {"n1": {"nvidia.com/gpu": 1}})]
    report.report()
    capacity = hub.applied[-1][1]["status"]["capacity"]
    assert capacity["reservedFor"] == ["w"]
    assert capacity["free"]["nvidia.com/gpu"] == 0
