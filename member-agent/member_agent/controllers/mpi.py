"""What both MPI designs generate, as pure functions: hostfiles, host discovery, the kubectl
rsh agent, the ssh key mount and the sshd and mpirun command lines.

``tests/mpirun`` runs exactly these texts with a real OpenMPI ``mpirun``.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.kinds.naming import derived_name, replica_name
from member_agent.controllers import core

Body = dict[str, Any]
CONFIG_MOUNT = "/etc/mpi"
HOSTFILE = f"{CONFIG_MOUNT}/hostfile"
KUBEXEC = f"{CONFIG_MOUNT}/kubexec.sh"
DISCOVER_HOSTS = f"{CONFIG_MOUNT}/discover_hosts.sh"
KUBECTL_DIR = "/opt/kube"
ROOT_SSH = "/root/.ssh"
NON_ROOT_SSH_PORT = 2222
PER_NODE_FLAGS = ("-N", "-npernode", "--npernode")


class LauncherAfterWorkers:
    """Both designs: one launcher named ``<job>-launcher``, created once every worker is
    Ready (so mpirun never races worker start-up: kubeflow/mpi-operator#386, #481)."""

    launcher: str
    worker: str

    def pod_name(self, job_name: str, rtype: str, index: int) -> str:
        if rtype == self.launcher:
            return derived_name(job_name, "launcher")
        return replica_name(job_name, rtype, index)

    def held_types(self, job: Mapping[str, Any], types: Sequence[core.ReplicaType],
                   pods: Sequence[core.ObservedPod]) -> frozenset[str]:
        wanted = sum(t.replicas for t in types if t.name == self.worker)
        ready = [p for p in pods if p.role == self.worker.lower() and p.ready and not p.deleting]
        return frozenset() if len(ready) >= wanted else frozenset({self.launcher})


def hostfile(hosts: Sequence[str], slots: int) -> str:
    """OpenMPI's hostfile: one ``<host> slots=<n>`` line per worker."""
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def discover_hosts(running: Sequence[str], slots: int | None = None) -> str:
    """Horovod's elastic host discovery: the workers running now, sorted."""
    suffix = f":{slots}" if slots is not None else ""
    return "#!/bin/sh\n" + "".join(f"echo {host}{suffix}\n" for host in sorted(running))


def kubexec(container: str, kubectl: str = f"{KUBECTL_DIR}/kubectl") -> str:
    """The rsh agent of the Kubeflow v1 design: mpirun runs ``kubexec.sh <pod> <command>`` and
    this runs the command in that worker pod through the API server."""
    return ("#!/bin/sh\n"
            "set -x\n"
            "POD_NAME=$1\n"
            "shift\n"
            f'{kubectl} exec "${{POD_NAME}}" --container {shlex.quote(container)} '
            '-- /bin/sh -c "$*"\n')


def slots_from(extra_args: Sequence[str]) -> int:
    """Processes per worker asked for with ``-N n`` (or ``--npernode``); else 1."""
    for flag, value in itertools.pairwise(extra_args):
        if flag in PER_NODE_FLAGS and value.isdigit():
            return int(value)
    return 1


def is_root_mount(path: str) -> bool:
    return path.rstrip("/") == ROOT_SSH


def ssh_volume(secret: str, mount: str) -> tuple[Body, Body]:
    """The SSH key Secret as a volume and its mount. For root the files are 0600, as ssh and
    sshd demand of files their user owns; elsewhere 0644, since a non-root user reads files
    root owns (ssh then accepts a readable private key; sshd runs with StrictModes off)."""
    volume = {"name": "ssh-auth", "secret": {
        "secretName": secret, "defaultMode": 0o600 if is_root_mount(mount) else 0o644,
        "items": [{"key": "ssh-privatekey", "path": "id_rsa"},
                  {"key": "ssh-publickey", "path": "id_rsa.pub"},
                  {"key": "ssh-publickey", "path": "authorized_keys"}]}}
    return volume, {"name": "ssh-auth", "mountPath": mount}


def ssh_port(mount: str) -> int:
    return 22 if is_root_mount(mount) else NON_ROOT_SSH_PORT


def sshd_command(sshd: str, mount: str) -> list[str]:
    """sshd in the foreground, trusting only the job's key. As non-root it cannot bind port
    22 nor read the image's host keys, so it uses the job key as host key and port 2222."""
    command = [sshd, "-De", "-o", f"AuthorizedKeysFile={mount}/authorized_keys",
               "-o", "PasswordAuthentication=no"]
    if not is_root_mount(mount):
        command += ["-p", str(NON_ROOT_SSH_PORT), "-o", "StrictModes=no",
                    "-o", f"HostKey={mount}/id_rsa", "-o", "PidFile=/tmp/sshd.pid",
                    "-o", "UsePAM=no"]
    return command


def ssh_args(mount: str) -> str:
    """What mpirun passes to ssh (``OMPI_MCA_plm_rsh_args``)."""
    return (f"-p {ssh_port(mount)} -o IdentityFile={mount}/id_rsa "
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
            "-o ConnectionAttempts=10 -o LogLevel=ERROR")


def mpirun_command(*, mpi_home: str | None, mca: Mapping[str, str],
                   extra_args: Sequence[str], cmd: Sequence[str]) -> list[str]:
    """The T9k launcher's command: mpirun over the generated hostfile, with ``--prefix`` so
    remote daemons are found under mpiHome, ``--mca`` for each spec.mca entry, the extra
    arguments, then the program."""
    home = (mpi_home or "").rstrip("/")
    command = [f"{home}/bin/mpirun" if home else "mpirun", "--hostfile", HOSTFILE]
    if home:
        command += ["--prefix", home]
    for key, value in mca.items():
        command += ["--mca", key, value]
    return [*command, *extra_args, *cmd]
