"""The hub's start-up, retried by kopf after a failure further on, starts one elector."""

from __future__ import annotations

import threading
from typing import Any

from fleet.hub import handlers


class Elector:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, stop: threading.Event) -> None:
        self.runs += 1


def test_a_retried_start_up_keeps_the_first_elector(monkeypatch: Any) -> None:
    monkeypatch.setattr(handlers, "_ELECTION", [])
    made: list[Elector] = []

    def make() -> Any:
        made.append(Elector())
        return made[-1]

    first = handlers.elector_once(make)
    again = handlers.elector_once(make)
    assert again is first
    assert len(made) == 1

