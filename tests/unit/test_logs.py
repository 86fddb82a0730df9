from __future__ import annotations

import json
import logging

import pytest

from fleet.logs import JsonFormatter, RefusalsAreNotErrors, configure


def test_one_json_object_per_line_with_fleet_field_names() -> None:
    record = logging.LogRecord("fleet.hub", logging.WARNING, __file__, 1, "bound %s", ("a/b",),
                               None)
    record.job = "default/train"
    line = JsonFormatter("hub").format(record)
    entry = json.loads(line)
    assert "\n" not in line
    assert {k: entry[k] for k in ("level", "component", "logger", "msg", "job")} == {
        "level": "warning", "component": "hub", "logger": "fleet.hub", "msg": "bound a/b",
        "job": "default/train"}
    assert entry["ts"].endswith("Z")
    assert len(entry["ts"]) == len("2026-01-01T00:00:00.000Z")


def test_exceptions_go_in_one_field() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        import sys
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(JsonFormatter("agent").format(record))
    assert "ValueError: bad" in entry["exc"]


def test_extras_the_encoder_cannot_take_become_text() -> None:
    # kopf attaches its own objects (dataclasses holding locks) to records it logs, e.g. when
    # a webhook refuses an object: the line must still be written.
    import dataclasses
    import threading

    @dataclasses.dataclass
    class Holder:
        lock: object

    record = logging.LogRecord("kopf", logging.ERROR, __file__, 1, "refused", (), None)
    record.settings = Holder(threading.Lock())
    entry = json.loads(JsonFormatter("hub").format(record))
    assert entry["msg"] == "refused"
    assert "Holder(lock=" in entry["settings"]


def test_the_level_comes_from_fleet_log_level_and_a_bad_name_keeps_info(
        monkeypatch: pytest.MonkeyPatch) -> None:
    root = logging.getLogger()
    saved = root.level, root.handlers[:]
    try:
        for text, level in (("debug", logging.DEBUG), ("WARNING", logging.WARNING),
                            ("loud", logging.INFO), ("", logging.INFO)):
            monkeypatch.setenv("FLEET_LOG_LEVEL", text)
            configure("hub")
            assert root.level == level, text
        configure("hub", logging.ERROR)  # an explicit level wins
        assert root.level == logging.ERROR
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]


def test_a_webhook_refusal_is_an_info_line_and_other_errors_stay_errors() -> None:
    refusals = RefusalsAreNotErrors()
    root = logging.getLogger()
    saved = root.level
    try:
        root.setLevel(logging.INFO)
        refused = logging.LogRecord("kopf.objects", logging.ERROR, __file__, 1,
                                    "Webhook 'job' failed permanently: spec.x: too deep", (),
                                    None)
        assert refusals.filter(refused)
        entry = json.loads(JsonFormatter("hub").format(refused))
        assert (entry["level"], entry["msg"]) == ("info", "Webhook 'job' refused: spec.x: too deep")
        failed = logging.LogRecord("kopf.objects", logging.ERROR, __file__, 1,
                                   "Handler 'bind' failed permanently: boom", (), None)
        assert refusals.filter(failed)
        assert failed.levelno == logging.ERROR
        root.setLevel(logging.WARNING)  # FLEET_LOG_LEVEL=warning: refusals are not shown
        assert not refusals.filter(logging.LogRecord(
            "kopf.objects", logging.ERROR, __file__, 1, "Webhook 'job' failed permanently: x",
            (), None))
    finally:
        root.setLevel(saved)
