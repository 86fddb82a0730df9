"""CI's lane of ``make bench``: every part at small sizes (``--short``), so that the bench
cannot rot unseen. It fails when a benchmark breaks (an exception, a part that reports
nothing, a figure that is not a number), never on a figure."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from e2e.conftest import require_local_backend

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]
# one result of each part and phase the full bench reports
EXPECTED = ("division p99, 10 clusters", "quota admission (engine)", "capacity report bytes",
            "scheduling pass p99, in process", "hub writes per job bound at its first look",
            "hub API raw write rate", "create -> all pods Running, p99",
            "hub RSS with", "decisions per second", "hub API writes per bound job",
            "wall time, Kueue's baseline", "average time to admission, small",
            "dashboard jobs view, time to serve")


# The lane takes about 7 minutes on a quiet 2-core machine, more on a busy one: past the
# suite's 10 minutes per test, the bench was killed with its output unread.
@pytest.mark.timeout(1800)
def test_every_part_of_the_bench_runs_at_small_sizes(tmp_path: Path) -> None:
    require_local_backend()
    out = tmp_path / "results.jsonl"
    bench = subprocess.Popen([sys.executable, "-m", "e2e.bench", "--short", "--out", str(out)],
                             cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = bench.communicate(timeout=1500)
    except subprocess.TimeoutExpired:
        # Asked to stop, the bench tears its fleets down (killed, it left API servers running)
        bench.terminate()
        try:
            stdout, stderr = bench.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            bench.kill()
            stdout, stderr = bench.communicate()
        pytest.fail(f"the bench overran 1,500 s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    assert bench.returncode == 0, f"the bench failed:\n{stdout[-3000:]}\n{stderr[-3000:]}"
    results = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    names = [r["name"] for r in results]
    missing = [e for e in EXPECTED if not any(n.startswith(e) for n in names)]
    assert not missing, f"parts that reported nothing: {missing}; reported: {names}"
    broken = [r["name"] for r in results
              if not isinstance(r["value"], int | float) or math.isnan(r["value"])]
    assert not broken, f"figures that are not numbers: {broken}"
