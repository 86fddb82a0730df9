"""Structured logs: one JSON object per line, with the component that wrote it.

The encoding is python-json-logger's (already in the tree through kopf); fleet only fixes the
field names (``ts``, ``level``, ``component``, ``logger``, ``msg``, ``exc``) and a UTC time
stamp with milliseconds. A record's ``extra`` fields come out as fields of their own.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter


class JsonFormatter(_JsonFormatter):
    def __init__(self, component: str) -> None:
        super().__init__(
            "{asctime}{levelname}{name}{message}", style="{",
            rename_fields={"asctime": "ts", "levelname": "level", "name": "logger",
                           "message": "msg", "exc_info": "exc"},
            static_fields={"component": component},
            json_default=_as_text,
        )
        self.component = component

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + \
            f".{int(record.msecs):03d}Z"

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        log_data["level"] = str(log_data.get("level", "")).lower()
        return log_data


def _as_text(value: object) -> str:
    """Extra fields the encoder cannot take (kopf attaches its own objects to its records)
    become short text: a log line must never fail to be written."""
    text = str(value)
    return text if len(text) <= 500 else text[:500] + "..."


LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def level_from_env(default: int = logging.INFO) -> int:
    """``$FLEET_LOG_LEVEL`` (debug, info, warning, error; the charts' ``logLevel``); an
    unknown name keeps ``default`` rather than stopping a controller."""
    return LEVELS.get(os.environ.get("FLEET_LOG_LEVEL", "").strip().lower(), default)


class RefusalsAreNotErrors(logging.Filter):
    """kopf logs a webhook's refusal of an object as its handler "failed permanently", at
    ERROR. A user's invalid job is the webhook working, not the hub failing: it becomes an
    INFO line "Webhook 'job' refused: <why>" (and none below the root's level), so that
    ERROR stays for what an operator must look at."""

    PREFIX = "Webhook '"
    FAILED = " failed permanently: "

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.ERROR or not record.name.startswith("kopf"):
            return True
        message = record.getMessage()
        if not message.startswith(self.PREFIX) or self.FAILED not in message:
            return True
        record.msg, record.args = message.replace(self.FAILED, " refused: ", 1), ()
        record.levelno, record.levelname = logging.INFO, "INFO"
        return logging.getLogger().isEnabledFor(logging.INFO)


def configure(component: str, level: int | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(component))
    handler.addFilter(RefusalsAreNotErrors())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level_from_env() if level is None else level)
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # One line per webhook call, and its response size can read as a status ("200 403").
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
