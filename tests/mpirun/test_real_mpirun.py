"""A real OpenMPI ``mpirun`` runs exactly what each MPI controller generates.

Five local "worker pods" run our random-walk program (``random_walk.c``) with 3 processes
each, as seed 000's example does. What the controllers generate is used as is: hostfile,
``kubexec.sh``, the launcher's environment and command line, the workers' sshd command line,
and the SSH key laid out as the Secret volume lays it out. What a cluster would provide is
stood in for, and only that:

- paths under ``/etc/mpi`` and the SSH mount point are read from a temporary directory (a
  volume mount elsewhere);
- the Kubeflow design's ``kubectl exec <pod> -- cmd`` runs ``cmd`` locally, as that pod;
- the T9k design's workers are real sshd processes, one per loopback address, and an ssh
  client config maps each worker's DNS name to its address (cluster DNS);
- each stand-in worker gets its own shared-memory and temporary directory, as each pod has
  its own ``/dev/shm`` and ``/tmp`` (processes of different "pods" on one machine would
  otherwise collide: OpenMPI's daemons race to create one session directory under ``/tmp``).

OpenMPI and sshd come from Debian packages (``.ci/run`` installs them).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from fleet import jobkeys
from member_agent.controllers import mpi
from member_agent.controllers.kubeflow_mpi import KUBEFLOW_MPI
from member_agent.controllers.t9k_mpi import T9K_MPI
from tests.unit.test_job_status import pod, run

HERE = Path(__file__).parent
WORKERS, PER_WORKER = 5, 3
Body = dict[str, Any]


# Every "pod" here is a process on this machine, which real pods are not: keep OpenMPI's
# daemons and messages on the loopback interface, and keep its daemons from sharing one
# hwloc topology file in shared memory (several daemons on one host crash writing it).
ONE_HOST = {"OMPI_MCA_oob_tcp_if_include": "lo", "OMPI_MCA_btl_tcp_if_include": "lo",
            "OMPI_MCA_rtc": "^hwloc"}


def tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists()
                                   else None)
    if found:
        return found
    if os.environ.get("FLEET_MPI_REQUIRED") == "1":
        pytest.fail(f"{name} is required (install openmpi-bin libopenmpi-dev openssh-server)")
    pytest.skip(f"{name} not installed")


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mpi") / "random_walk"
    subprocess.run([tool("mpicc"), "-O1", "-o", str(out), str(HERE / "random_walk.c")],
                   check=True)
    return out


def remap(text: str, mounts: Mapping[str, Path]) -> str:
    for path, local in mounts.items():
        text = text.replace(path, str(local))
    return text


def check_output(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    total = WORKERS * PER_WORKER
    assert f"walkers finished: {total * 2} of {total * 2}; ranks: {total}" in result.stdout, \
        result.stdout[-2000:]


def launcher(kind: Any, job: Body, workers: list[Any]) -> tuple[Body, dict[str, str]]:
    """The launcher pod the controller creates once the workers are ready, and the files of
    the job's ConfigMap."""
    _, job = run(kind, job, [])
    decision, _ = run(kind, job, workers)
    pods = [p for p in decision.create if "launcher" in p["metadata"]["name"]]
    assert pods, "no launcher although every worker is ready"
    config = next(b for _, b in decision.objects if b["kind"] == "ConfigMap")
    return pods[0], config["data"]


def env_of(container: Mapping[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or []}


def test_kubeflow_mpijob_kubexec(program: Path, tmp_path: Path) -> None:
    mpirun = tool("mpirun")
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob",
           "metadata": {"name": "walk", "namespace": "default", "uid": "u1"},
           "spec": {"slotsPerWorker": PER_WORKER, "mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "launcher", "image": "mpi",
                    "command": ["mpirun", "--allow-run-as-root", "-bind-to", "none",
                                str(program), "20", "40", "2"]}]}}},
               "Worker": {"replicas": WORKERS, "template": {"spec": {"containers": [
                   {"name": "worker", "image": "mpi"}]}}}}}}
    pod_spec, files = launcher(KUBEFLOW_MPI, job, [pod("Worker", i) for i in range(WORKERS)])
    etc = tmp_path / "etc-mpi"
    etc.mkdir()
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(  # runs the command locally, as the named pod would
        "#!/bin/sh\n[ \"$1\" = exec ] || exit 2\npod=$2; shift 2\n"
        "while [ \"$1\" != \"--\" ]; do shift; done; shift\n"
        f"mkdir -p {tmp_path}/shm/$pod\n"
        f"TMPDIR={tmp_path}/shm/$pod "
        f"OMPI_MCA_btl_vader_backing_directory={tmp_path}/shm/$pod exec \"$@\"\n")
    kubectl.chmod(0o755)
    mounts = {mpi.CONFIG_MOUNT: etc, f"{mpi.KUBECTL_DIR}/kubectl": kubectl}
    for name, text in files.items():
        target = etc / name
        target.write_text(remap(text, mounts))
        target.chmod(0o555)
    assert files["hostfile"].splitlines()[0] == f"walk-worker-0 slots={PER_WORKER}"
    container = pod_spec["spec"]["containers"][0]
    env = {k: remap(v, mounts) for k, v in env_of(container).items()}
    command = [mpirun if c == "mpirun" else c for c in container["command"]]
    result = subprocess.run(command, env={**os.environ, **env, **ONE_HOST}, capture_output=True,
                            text=True, timeout=180, check=False)
    check_output(result)


@pytest.fixture
def sshd_workers(tmp_path: Path) -> Iterator[tuple[Path, list[str], Path]]:
    """Five sshd "workers" started with the controller's own worker command line."""
    sshd = tool("sshd")
    mount = "/home/mpiuser/.ssh"  # the non-root layout: 0644 keys, sshd on port 2222
    job = t9k_job(Path("/bin/true"), mount)
    decision, _ = run(T9K_MPI, job, [])
    keys = tmp_path / "ssh"
    keys.mkdir()
    data = jobkeys.ssh_secret_data()
    volume, _ = mpi.ssh_volume("walk-ssh", mount)
    for item in volume["secret"]["items"]:
        target = keys / item["path"]
        target.write_bytes(base64.b64decode(data[item["key"]]))
        target.chmod(volume["secret"]["defaultMode"])
        if os.geteuid() == 0:
            os.chown(target, 65534, 65534)  # root owns a Secret's files, not the user
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    processes = []
    hosts = []
    config = tmp_path / "ssh_config"
    lines = []
    for index, worker in enumerate(decision.create):
        command = [remap(c, {mount: keys}) for c in worker["spec"]["containers"][0]["command"]]
        command[0] = sshd
        address = f"127.0.0.{index + 2}"
        shm = tmp_path / "shm" / str(index)
        shm.mkdir(parents=True)
        command += ["-o", f"ListenAddress={address}",
                    "-o", "AcceptEnv=OMPI_MCA_btl_vader_backing_directory TMPDIR",
                    "-o", f"PidFile={tmp_path}/sshd-{index}.pid"]
        processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                          stderr=(tmp_path / f"sshd-{index}.log").open("w")))
        host = f"walk-worker-{index}.walk.default.svc"
        hosts.append(host)
        lines += [f"Host {host}", f"  HostName {address}",
                  f"  SetEnv OMPI_MCA_btl_vader_backing_directory={shm} TMPDIR={shm}"]
    config.write_text("\n".join(lines) + "\n")
    time.sleep(1.0)
    try:
        yield keys, hosts, config
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)


def t9k_job(program: Path, mount: str) -> Body:
    """Seed 000's random-walk MPIJob, with OpenMPI where Debian puts it."""
    return {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "MPIJob",
            "metadata": {"name": "walk", "namespace": "default", "uid": "u1"},
            "spec": {"worker": {"replicas": WORKERS,
                                "extraMPIArgs": ["-N", str(PER_WORKER), "--enable-recovery",
                                                 "--max-restarts", "100", "--allow-run-as-root",
                                                 "-bind-to", "none"],
                                "cmd": [str(program), "20", "40", "2"],
                                "template": {"spec": {"containers": [
                                    {"name": "mpi-worker", "image": "mpi"}]}}},
                     "mca": {"btl": "^openib"}, "ssh": {"sshdPath": "/usr/sbin/sshd",
                                                        "sshAuthMountPath": mount},
                     "mpiHome": "/usr", "runPolicy": {"cleanUpWorkers": True}}}


def test_t9k_mpijob_over_ssh(program: Path, tmp_path: Path,
                             sshd_workers: tuple[Path, list[str], Path]) -> None:
    tool("mpirun")
    keys, hosts, ssh_config = sshd_workers
    mount = "/home/mpiuser/.ssh"
    pod_spec, files = launcher(T9K_MPI, t9k_job(program, mount),
                               [pod("worker", i) for i in range(WORKERS)])
    assert files["hostfile"].split() == [w for h in hosts for w in (h, f"slots={PER_WORKER}")]
    etc = tmp_path / "etc-mpi"
    etc.mkdir()
    (etc / "hostfile").write_text(files["hostfile"])
    mounts = {mpi.CONFIG_MOUNT: etc, mount: keys}
    container = pod_spec["spec"]["containers"][0]
    env = {k: remap(v, mounts) for k, v in env_of(container).items()}
    env["OMPI_MCA_plm_rsh_args"] = f"-F {ssh_config} " + env["OMPI_MCA_plm_rsh_args"]
    command = [remap(c, mounts) for c in container["command"]]
    assert command[:5] == ["/usr/bin/mpirun", "--hostfile", f"{etc}/hostfile", "--prefix", "/usr"]
    result = subprocess.run(command, env={**os.environ, **env, **ONE_HOST}, capture_output=True,
                            text=True, timeout=180, check=False)
    check_output(result)
