"""The injected wall-clock offset: read from the environment, bounded, and never fatal."""

from __future__ import annotations

from datetime import timedelta

import pytest

from fleet import clock


@pytest.mark.parametrize(("value", "seconds"), [
    ("", 0.0), ("30", 30.0), ("-30.5", -30.5), ("1e9", 3600.0), ("-1e9", -3600.0),
    ("soon", 0.0),
])
def test_the_offset_is_bounded_and_a_bad_value_means_none(
        monkeypatch: pytest.MonkeyPatch, value: str, seconds: float) -> None:
    monkeypatch.setenv("FLEET_CHAOS_CLOCK_OFFSET_SECONDS", value)
    assert clock._offset_from_environment() == timedelta(seconds=seconds)


def test_text_reads_as_the_api_stamps_times() -> None:
    assert len(clock.text()) == len("2026-01-01T00:00:00Z")
    micro = clock.text(micro=True)
    assert micro.endswith("Z")
    assert len(micro) == len("2026-01-01T00:00:00.000000Z")
