"""The hub's scheduling pass as a pure function that the hub and the simulator share.

``plan_pass(PassView) -> Plan``: a frozen snapshot in (:mod:`planner.view`), typed intents
out, each with its reason, in the order to write them (:mod:`planner.intents`).
"""

from planner.plan import Plan, plan_pass
from planner.view import PassView

__all__ = ["PassView", "Plan", "plan_pass"]
