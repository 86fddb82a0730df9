"""The guard that turns unexpected skips into failures under FLEET_E2E_REQUIRED=1."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

def test_unexpected():
    pytest.skip("no backend here")

def test_expected():
    pytest.skip("this test runs a fleet of its own whose hub and agents are host processes "
                "on the local backend")

def test_runs():
    pass
"""


@pytest.mark.parametrize(("required", "failed", "skipped"), [("1", 1, 1), ("0", 0, 2)])
def test_only_listed_skips_pass_when_everything_is_required(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, required: str,
        failed: int, skipped: int) -> None:
    monkeypatch.setenv("FLEET_E2E_REQUIRED", required)
    pytester.makepyfile(test_skips=SKIPPING)
    result = pytester.runpytest_inprocess("-p", "tests.required", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=failed, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(["*unexpected skip with FLEET_E2E_REQUIRED=1*no backend here*"])
