"""The fuzzer's short lane (issue 15, scenario 9): fuzzed objects of every kind applied to a
real hub are rejected naming their field, or accepted and handled with a condition; no
controller logs a traceback or outgrows its memory bound, and a valid job runs afterwards.

``FLEET_FUZZ_SEED`` replays a run (the seed is printed); ``FLEET_FUZZ_COUNT`` sets the count
(``make chaos`` runs 10,000 through ``python -m e2e.chaos.fuzz``)."""

from __future__ import annotations

import os
import random

import pytest

from e2e.chaos.fuzz import run
from e2e.localfleet import LocalFleet

pytestmark = pytest.mark.e2e


def test_fuzzed_objects_are_rejected_naming_a_field_or_handled(fleet: LocalFleet) -> None:
    seed = int(os.environ.get("FLEET_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    count = int(os.environ.get("FLEET_FUZZ_COUNT") or 500)
    print(f"fuzz seed: {seed}", flush=True)
    report = run(fleet, seed, count, say=lambda m: print(m, flush=True))
    print(report.summary())
    assert report.ok, report.summary()
    assert report.rejected
    assert report.accepted
