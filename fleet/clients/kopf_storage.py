"""kopf settings for operators that only watch (``kopf.on.event``), as the hub and agent do.

kopf builds a "diff base" of every object on every watch event (a deep copy without status)
to detect create/update causes, whether or not any handler wants them. With event handlers
only, nothing reads it, and at a thousand events a second the copies are a fifth of the hub's
CPU; :class:`NoDiffBase` skips them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kopf


class NoDiffBase(kopf.DiffBaseStorage):
    """Remembers nothing: every event looks unchanged to kopf's cause detection, which is
    right when there are no on.create/update/delete handlers to trigger."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
              ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


def watch_only(settings: kopf.OperatorSettings) -> None:
    """Settings for a kopf operator whose handlers only watch."""
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.enabled = False  # events are written by our code, with exact texts


# How soon a failed start-up activity runs again (kopf's default is a minute). A start-up
# fails while an API server it lists from is down, and nothing works until it succeeds; it
# must be safe to run again (metrics.serve is).
STARTUP_RETRY_SECONDS = 3.0
