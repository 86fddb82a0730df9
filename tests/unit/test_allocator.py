"""The hub and the agent run on two C heap arenas, however many threads allocate."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# Eight threads each allocate blocks past CPython's own pools at the same time, then glibc
# lists its arenas on stderr.
THREADS = """
import ctypes, sys, threading
if sys.argv[1] == "limited":
    from fleet import allocator
    allocator.limit_arenas()
start = threading.Barrier(8)
def churn():
    start.wait()
    kept = [bytes(4096) for _ in range(2000)]
    start.wait()
threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def arenas(mode: str, env: dict[str, str] | None = None) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", THREADS, mode], capture_output=True,
                          text=True, check=True, timeout=60, env={**environ, **(env or {})})
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


def test_threads_share_two_arenas() -> None:
    try:
        default = arenas("default")
    except (subprocess.CalledProcessError, OSError):
        pytest.skip("glibc's malloc_stats only")
    assert default > 2  # (else this test could not tell)
    assert arenas("limited") <= 2


def test_the_environment_says_otherwise() -> None:
    try:
        assert arenas("limited", {"MALLOC_ARENA_MAX": "16"}) > 2
    except (subprocess.CalledProcessError, OSError):
        pytest.skip("glibc's malloc_stats only")
