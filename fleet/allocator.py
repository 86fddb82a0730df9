"""The C allocator under the hub and the agent: two arenas.

CPython takes objects up to 512 bytes from its own pools; larger ones (the watches' JSON
chunks, dicts of many keys, long lists) come from the C library's ``malloc``. glibc's gives
every thread that allocates an arena of its own, up to eight per core, and an arena keeps
the pages its freed blocks leave until it is trimmed. The hub's watch, writer and scheduler
threads each churn through parsed objects, so each grows an arena of its own high-water
mark. Two arenas, as ``MALLOC_ARENA_MAX=2`` would set (read too early to set it once the
interpreter runs: ``mallopt`` does it in process), left the scale bench's hub at 329 MiB at
the end of its run against 340 with 16 (means of six and two runs of one build, within the
runs' spread: see docs/benchmarks.md). A ``malloc_trim`` now and then on top moved nothing more.

Only glibc has this call; elsewhere (musl, macOS) it is a no-op.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

ARENAS = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_arenas(arenas: int = ARENAS) -> None:
    """Call first thing in a process: threads started later share ``arenas`` arenas
    (unless ``MALLOC_ARENA_MAX`` says how many: glibc has read it already)."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return  # not glibc
    if not mallopt(M_ARENA_MAX, arenas):
        log.warning("mallopt(M_ARENA_MAX, %d) refused; the C allocator keeps its default", arenas)
