"""A pytest plugin: under ``FLEET_E2E_REQUIRED=1`` (CI) a skip is a failure unless it is
listed in :data:`EXPECTED_SKIPS` with the reason it may skip, so CI can never pass by quietly
not running something."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

# (text the skip reason contains, why that skip is acceptable in CI)
EXPECTED_SKIPS: tuple[tuple[str, str], ...] = (
    ("runs a fleet of its own whose hub and agents are host processes on the local backend",
     "only on the kind backend (make e2e-kind), never in CI, which runs the binaries backend: "
     "the short chaos lane's own fleet is one of host processes on kwok control planes, which "
     "CI runs; on kind its scenarios of the hub as Pods run on the kind fleet"),
    ("cannot reach JobSet's webhook on this host",
     "only on the kind backend (make e2e-kind), never in CI, which runs the binaries backend "
     "and so the member-trainer test, whose member's API server is a host process"),
)


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def expected(reason: str) -> bool:
    return any(text in reason for text, _ in EXPECTED_SKIPS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if os.environ.get("FLEET_E2E_REQUIRED") != "1" or not report.skipped:
        return
    if hasattr(report, "wasxfail"):
        return  # an expected failure is reported as a skip; it is not one
    reason = skip_reason(report)
    if expected(reason):
        return
    report.outcome = "failed"
    report.longrepr = (f"unexpected skip with FLEET_E2E_REQUIRED=1 ({item.nodeid}): {reason}\n"
                       "CI runs everything; list a skip in EXPECTED_SKIPS (tests/required.py) with "
                       "its reason only when it may not run there")
