"""A bench's kept working folder is one bench's at a time (e2e.bench.__main__.held)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.bench.__main__ import held

# Another bench holding the folder, as held() leaves it (importing the bench takes seconds)
HOLD = """
import fcntl, os, sys, time
with open(sys.argv[1], "a+") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    lock.write(str(os.getpid()))
    lock.flush()
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_bench_in_the_same_folder_stops_naming_the_first(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    first = subprocess.Popen([sys.executable, "-c", HOLD, str(lock)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "held"
        refused = f"in use by a bench still running .pid {first.pid}"
        with pytest.raises(SystemExit, match=refused), held(lock):
            pass
    finally:
        first.kill()
        first.wait()
    with held(lock):  # the killed holder's lock went with it
        assert lock.read_text() == str(os.getpid())
