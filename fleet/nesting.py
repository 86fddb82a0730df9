"""Objects as deeply nested as an API server returns them, read without failing.

An API server stores any JSON that Go's encoding/json decodes: up to 10,000 levels. Some fields
of a job stay open (a T9k TensorBoard spec, a job stored under an older CRD whose pod
templates were open), so a user's job may nest that deep. Python's json, copy and fleet's own
walks recurse once or twice per level, and Python stops at 1,000 frames: one such object
failed kopf's watch of its kind, and with it every handler of the process. So the hub and
the agents raise the limit above what the API server can return, and give threads the stack
for it; the hub then refuses (webhook) or marks invalid (controller) any job nested deeper
than fleet accepts (``fleet.api.size.too_deep``), before anything copies it to a member.
"""

from __future__ import annotations

import sys
import threading

API_MAX_DEPTH = 10_000  # Go's encoding/json: "exceeded max depth"
FRAMES_PER_LEVEL = 4  # a deep copy, a walk and the calls between them, with room to spare
THREAD_STACK_BYTES = 64 * 1024 * 1024  # reserved address space; pages are used as needed


def allow_api_depth() -> None:
    """Call first thing in a process that watches users' objects (before it starts threads)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), FRAMES_PER_LEVEL * API_MAX_DEPTH))
    threading.stack_size(THREAD_STACK_BYTES)
