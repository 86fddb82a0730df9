"""The Works this agent has applied to its member: the one registry its parts share.

The applier records a Work once its manifests are on the member; the status reporter, the
reservation holds and the capacity report read it; the remover takes a Work out when it goes.
A Work's latest copy from the hub replaces the recorded one on every event, so readers see
its current phase and placement, while ``generation`` stays the one last applied.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fleet.api import protocol
from propagation.jobkey import JobKey

Body = dict[str, Any]
Identity = tuple[str, str, str]  # (kind, namespace, name) of a manifest


def job_key(work: Mapping[str, Any]) -> JobKey:
    """The member job a Work carries (its first manifest)."""
    return JobKey.of_body(work["spec"]["manifests"][0])


def identity(manifest: Mapping[str, Any]) -> Identity:
    meta = manifest["metadata"]
    return (manifest["kind"], meta.get("namespace", ""), meta["name"])


@dataclass
class Entry:
    work: Body
    generation: int | None  # the generation on the member; None: to be applied again
    first_seen: float  # when this agent first applied it (monotonic)


class WorkBook:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._by_job: dict[JobKey, set[str]] = {}
        # Works in a reservation's phases, which the status reporter looks at every round:
        # found by scanning every Work, each round cost as much as the Works the member had
        # ever been given (most long finished).
        self._reserving: set[str] = set()

    def record(self, work: Body) -> tuple[bool, Body | None]:
        """The Work's manifests are on the member at its generation. Returns whether it is
        new to this agent and the copy it replaces."""
        name = work["metadata"]["name"]
        generation = work["metadata"].get("generation", 0)
        with self._lock:
            entry = self._entries.get(name)
            self._note_phase(name, work)
            if entry is None:
                self._entries[name] = Entry(work, generation, self._clock())
                self._by_job.setdefault(job_key(work), set()).add(name)
                return True, None
            before = entry.work
            entry.work, entry.generation = work, generation
            return False, before

    def update(self, work: Body) -> None:
        """A newer copy of a recorded Work (its status or metadata changed)."""
        with self._lock:
            entry = self._entries.get(work["metadata"]["name"])
            if entry is not None:
                entry.work = work
                self._note_phase(work["metadata"]["name"], work)

    def _note_phase(self, name: str, work: Mapping[str, Any]) -> None:
        if protocol.work_phase(work):
            self._reserving.add(name)
        else:
            self._reserving.discard(name)

    def is_applied(self, work: Mapping[str, Any]) -> bool:
        """Whether the Work's generation is on the member already."""
        meta = work["metadata"]
        with self._lock:
            entry = self._entries.get(meta["name"])
            return entry is not None and entry.generation == meta.get("generation", 0)

    def to_apply_again(self, name: str) -> bool:
        """Mark a Work to be applied again; False when it already is (or is gone)."""
        with self._lock:
            entry = self._entries.get(name)
            if entry is None or entry.generation is None:
                return False
            entry.generation = None
            return True

    def drop(self, name: str) -> None:
        with self._lock:
            entry = self._entries.pop(name, None)
            self._reserving.discard(name)
            if entry is not None:
                names = self._by_job.get(job_key(entry.work), set())
                names.discard(name)
                if not names:
                    self._by_job.pop(job_key(entry.work), None)

    def get(self, name: str) -> Body | None:
        with self._lock:
            entry = self._entries.get(name)
            return None if entry is None else entry.work

    def works(self) -> list[Body]:
        with self._lock:
            return [entry.work for entry in self._entries.values()]

    def reserving(self) -> list[str]:
        """The Works in a reservation's phases (``protocol.work_phase``), by name."""
        with self._lock:
            return sorted(self._reserving)

    def names(self) -> set[str]:
        with self._lock:
            return set(self._entries)

    def names_of(self, key: JobKey) -> set[str]:
        with self._lock:
            return set(self._by_job.get(key, ()))

    def first_seen(self) -> dict[str, float]:
        with self._lock:
            return {name: entry.first_seen for name, entry in self._entries.items()}

    def seen_for(self, name: str) -> float | None:
        """Seconds since this agent first applied the Work (None: not applied)."""
        with self._lock:
            entry = self._entries.get(name)
            return None if entry is None else self._clock() - entry.first_seen

    def used_by_others(self, name: str) -> set[Identity]:
        """The dependencies (every manifest but the job) the other Works carry."""
        with self._lock:
            others = [e.work for n, e in self._entries.items() if n != name]
        return {identity(m) for w in others for m in w["spec"]["manifests"][1:]}
