"""The hub's read-only web page: members, queues, jobs and the last hour, served by the
leader (:mod:`fleet.hub.dashboard.server`) and opened with ``kubectl fleet dashboard``."""

from fleet.hub.dashboard.server import start, whereabouts

__all__ = ["start", "whereabouts"]
