"""Reading every openb pod-list variant: missing columns get stated defaults, a malformed
row is one clear error naming file, line and column, and gpu_spec becomes a constraint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleet.sim.engine import Scenario, Simulation
from fleet.sim.runs import private_trace, proportional_slice
from fleet.sim.trace import Gang, Node, Trace, TraceError, load, read_pods, variants

NODES = "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
    f"n{i},64000,262144,2,{'T4' if i < 2 else 'G2'}\n" for i in range(4))
TIMED = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
         "deletion_time,scheduled_time\n")


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def test_a_variant_without_times_or_gpu_spec_reads_in_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, "openb_pod_list_multigpu50.csv",
                 "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                 "b,1000,1024,1,460\na,1000,1024,8,1000\nc,1000,1024,0,0\n")
    pods = read_pods(path)
    assert not pods.timed
    assert not pods.durations
    assert not pods.constrained
    assert [(p.name, p.created, p.models, p.gpu_demand) for p in pods.pods] == [
        ("b", 0.0, (), 0.46), ("a", 1.0, (), 8.0), ("c", 2.0, (), 0.0)]
    assert "no timestamps: arrivals in file order" in pods.describe()


def test_gpu_spec_lists_the_accepted_models(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", TIMED + "a,1000,1024,1,1000,V100M32|V100M16|V100M32,LS,"
                 "Running,5,100,6\nb,1000,1024,1,1000,,BE,Pending,7,9,\n")
    a, b = read_pods(path).pods
    assert a.models == ("V100M16", "V100M32")
    assert a.duration == 94.0
    assert b.models == ()
    assert b.duration == 2.0


@pytest.mark.parametrize(("text", "message"), [
    ("name,cpu_milli,memory_mib\na,1,1\n", "p.csv:1: no column 'num_gpu'"),
    ("name,cpu_milli,memory_mib,num_gpu\na,1,1,1\nb,x,1,1\n",
     "p.csv:3: column 'cpu_milli': 'x' is not an integer"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,1,1200\n",
     "p.csv:2: column 'gpu_milli': 1200 is outside [0, 1000]"),
    ("name,cpu_milli,memory_mib,num_gpu\na,1,1\n", "p.csv:2: expected 4 columns"),
    ("name,cpu_milli,memory_mib,num_gpu,gpu_spec\na,1,1,1,T4|b@d\n",
     "p.csv:2: column 'gpu_spec': 'b@d' is not a GPU model name"),
])
def test_a_malformed_file_is_one_error_naming_file_line_and_column(
        tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError) as error:
        read_pods(write(tmp_path, "p.csv", text))
    assert message in str(error.value)


def test_the_command_line_reports_a_bad_file_in_one_line(tmp_path: Path) -> None:
    write(tmp_path, "openb_node_list_gpu_node.csv", NODES)
    write(tmp_path, "openb_pod_list_default.csv", TIMED + "a,1000,1024,1,1000,,LS,R,0,9,0\n")
    bad = write(tmp_path, "extra.csv", "name,cpu_milli,memory_mib,num_gpu\na,1,1,two\n")
    done = subprocess.run(
        [sys.executable, "-m", "fleet.sim", "--trace", str(tmp_path), "--pods", str(bad),
         "--out", str(tmp_path / "out"), "--no-replay"],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"[simulate] error: {bad}:2: column 'num_gpu': 'two' is not an integer")
    assert "Traceback" not in done.stderr


def test_variants_are_every_pod_list_default_first_then_extra_files(tmp_path: Path) -> None:
    for name in ("openb_pod_list_multigpu50.csv", "openb_pod_list_default.csv",
                 "openb_pod_list_gpuspec33.csv", "other.csv"):
        write(tmp_path, name, "")
    extra = write(tmp_path.parent, "mine.csv", "")
    assert [p.name for p in variants(tmp_path, (extra,))] == [
        "openb_pod_list_default.csv", "openb_pod_list_gpuspec33.csv",
        "openb_pod_list_multigpu50.csv", "mine.csv"]


def test_a_model_constraint_changes_the_replay(tmp_path: Path) -> None:
    """Four pods of two GPUs on four 2-GPU nodes (two T4, two G2): unconstrained they all
    start at once; when three accept only T4 the third waits for one to finish."""
    write(tmp_path, "openb_node_list_gpu_node.csv", NODES)

    def replay(spec: str) -> list[float]:
        rows = "".join(f"p{i},1000,1024,2,1000,{spec if i < 3 else ''},LS,R,{i * 100},"
                       f"{i * 100 + 1000},{i * 100}\n" for i in range(4))
        pods = write(tmp_path, f"openb_pod_list_{spec or 'any'}.csv", TIMED + rows)
        trace = load(tmp_path, pods=pods, window=0, tenants=1)
        outcome = Simulation(trace, Scenario("node-aware"), clusters=1).run()
        return sorted(outcome.all_delays())

    assert replay("") == [0.0, 0.0, 0.0, 0.0]
    constrained = replay("T4")
    assert constrained[:3] == [0.0, 0.0, 0.0]
    assert constrained[3] > 0


def test_a_tenant_seed_draws_other_tenants_for_the_same_gangs(tmp_path: Path) -> None:
    write(tmp_path, "openb_node_list_gpu_node.csv", NODES)
    rows = "".join(f"p{i},1000,1024,1,1000,,LS,R,{i * 100},{i * 100 + 50},{i * 100}\n"
                   for i in range(40))
    pods = write(tmp_path, "openb_pod_list_default.csv", TIMED + rows)
    today, other = (load(tmp_path, pods=pods, window=0, tenant_seed=s) for s in (0, 7))
    assert load(tmp_path, pods=pods, window=0).gangs == today.gangs  # seed 0: as before
    assert [(g.name, g.arrival) for g in today.gangs] == [
        (g.name, g.arrival) for g in other.gangs]
    assert [g.tenant for g in today.gangs] != [g.tenant for g in other.gangs]


def test_a_private_cluster_holds_the_fleets_share_of_every_node_shape() -> None:
    """The private cluster of a quarter of the GPUs: a quarter of each node shape, not the
    file's first nodes (which here would all be one model)."""
    nodes = tuple([Node(f"t{i}", 104000, 2**39, 2, "T4") for i in range(8)]
                  + [Node(f"g{i}", 96000, 2**38, 8, "G2") for i in range(8)])
    gangs = (Gang("a", "tenant-0", 0.0, 10.0, 1, 1000, 1024, 1, 0),
             Gang("b", "tenant-1", 0.0, 10.0, 1, 1000, 1024, 1, 0))
    own = private_trace(Trace(nodes, gangs, ""), "tenant-0", 20)
    assert sorted(n.name for n in own.nodes) == ["g0", "g1", "t0", "t1"]
    assert [g.name for g in own.gangs] == ["a"]
    assert sum(n.gpus for n in proportional_slice(nodes, 80)) == 80  # the whole fleet
