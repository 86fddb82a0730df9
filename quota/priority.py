"""Job priority levels, as HiveD defines them and fleet maps them on.

A job's priority is one integer, resolved by the hub from its pod templates'
``priorityClassName``, the Kubeflow ``runPolicy.schedulingPolicy.priorityClass`` or the T9k
``scheduler.t9kScheduler.priority``. HiveD's levels map onto it: **guaranteed** jobs have a
priority of 0 or more (HiveD's range is 0–1000; larger PriorityClass values order the same
way) and hold quota; **opportunistic** jobs have a negative priority (HiveD's −1): they use no
quota, run only on idle capacity and are the first to be preempted.
"""

from __future__ import annotations

from enum import StrEnum

OPPORTUNISTIC_PRIORITY = -1  # HiveD's opportunistic level
MIN_GUARANTEED_PRIORITY = 0
MAX_GUARANTEED_PRIORITY = 1000  # HiveD's bound; larger values still order as given
# Kubernetes PriorityClass values are int32; anything beyond is refused where it is read.
MIN_PRIORITY = -(2**31)
MAX_PRIORITY = 2**31 - 1
# The tenant whose nodes opportunistic jobs keep to, whatever their quota leaf: they share
# idle nodes with each other, away from guaranteed jobs, so preempting them frees whole nodes.
OPPORTUNISTIC_TENANT = "opportunistic"


class Level(StrEnum):
    GUARANTEED = "Guaranteed"
    OPPORTUNISTIC = "Opportunistic"


def level_of(priority: int) -> Level:
    return Level.OPPORTUNISTIC if priority < MIN_GUARANTEED_PRIORITY else Level.GUARANTEED


def is_opportunistic(priority: int) -> bool:
    return level_of(priority) is Level.OPPORTUNISTIC
