"""Real control planes through kwokctl's binary runtime, with locally built binaries.

Each cluster is etcd + kube-apiserver (+ kube-controller-manager, and on members
kube-scheduler and the kwok controller), every one of them listening on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

STAGES = Path(__file__).with_name("stages.yaml")
# What kwok answers for every container's log on the members (kubectl logs; the hub's mirrors),
# in the CRI log format kwok reads.
POD_LOG = Path(__file__).with_name("pod.log")


@dataclass(frozen=True)
class Binaries:
    directory: Path

    def __getitem__(self, name: str) -> str:
        path = self.directory / name
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run e2e/toolchain/build.sh")
        return str(path)

    @staticmethod
    def build(repo: Path) -> Binaries:
        """Build (or find cached) control-plane binaries; progress goes to stderr."""
        out = subprocess.run(
            ["bash", str(repo / "e2e" / "toolchain" / "build.sh")],
            check=True, stdout=subprocess.PIPE, text=True,
        )
        return Binaries(Path(out.stdout.strip().splitlines()[-1]))


PORT_OPTIONS = ("kubeApiserverPort", "etcdPort", "etcdPeerPort", "kubeControllerManagerPort",
                "kubeSchedulerPort", "kwokControllerPort")


def free_ports(count: int) -> list[int]:
    """Distinct free ports on 127.0.0.1, chosen up front: kwokctl processes started in
    parallel would otherwise pick the same ones."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class RealNodeSettings:
    """What a cluster with a real node needs of its control plane: the API server advertised
    on the host end of the node's veth (the ``kubernetes`` Service's endpoint; the host
    forwards it to 127.0.0.1, where kwokctl's components talk), that address and the Service's
    in its certificate, a service CIDR of its own, a client certificate for kubelets, and kwok
    kept off the real node."""

    advertise_address: str
    service_cidr: str
    cert_sans: tuple[str, ...]
    pki: Path  # kwokctl's pki directory of this cluster (admin.crt, admin.key, ca.crt)


def kwokctl_config(binaries: Binaries, *, member: bool, ports: list[int],
                   audit_policy: Path | None = None, real: RealNodeSettings | None = None,
                   pki: Path | None = None) -> str:
    options: dict[str, object] = {
        **dict(zip(PORT_OPTIONS, ports, strict=True)),
        "runtime": "binary",
        "bindAddress": "127.0.0.1",
        "kubeApiserverBinary": binaries["kube-apiserver"],
        "kubeControllerManagerBinary": binaries["kube-controller-manager"],
        "kubeSchedulerBinary": binaries["kube-scheduler"],
        "kubectlBinary": binaries["kubectl"],
        "etcdBinary": binaries["etcd"],
        "kwokControllerBinary": binaries["kwok"],
        "disableQPSLimits": True,
        "quietPull": True,
        "kubeAuthorization": True,
        "kubeAdmission": True,
        "nodeLeaseDurationSeconds": 40,
    }
    if not member:
        # With a real node the hub schedules its own Pods.
        options["disable"] = ["kwok-controller"] if real else ["kube-scheduler", "kwok-controller"]
    if audit_policy is not None:
        options["kubeAuditPolicy"] = str(audit_policy)
    config: dict[str, object] = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": options,
    }
    # Webhooks (the hub's) are called at an endpoint of their Service, not its cluster IP
    # (host processes have no cluster IP routing; with real nodes it saves a hop).
    apiserver_args = {"enable-aggregator-routing": "true"}
    if pki is not None:
        # The API server's client certificate for kubelets: the agents' kubelet endpoints
        # (member_agent.kubelet_endpoint) accept only what the cluster's CA signed.
        apiserver_args.update({"kubelet-client-certificate": str(pki / "admin.crt"),
                               "kubelet-client-key": str(pki / "admin.key")})
    patches: list[dict[str, object]] = []
    if real:
        options["kubeApiserverCertSANs"] = list(real.cert_sans)
        apiserver_args.update({
            "advertise-address": real.advertise_address,
            "service-cluster-ip-range": real.service_cidr,
            "kubelet-preferred-address-types": "InternalIP,Hostname",
            "kubelet-client-certificate": str(real.pki / "admin.crt"),
            "kubelet-client-key": str(real.pki / "admin.key"),
            # kubelets run as their nodes (``node_identity``): the Node authorizer (on:
            # kwokctl runs Node,RBAC) and this admission plugin keep each to its own node
            "enable-admission-plugins": "NodeRestriction",
        })
        # kwok fakes only the GPU nodes (annotated), never the real node or its Pods.
        patches.append({"name": "kwok-controller", "extraArgs": [
            {"key": "manage-all-nodes", "value": "false"},
            {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"}]})
    config["componentsPatches"] = [
        {"name": "kube-apiserver",
         "extraArgs": [{"key": k, "value": v} for k, v in apiserver_args.items()]}, *patches]
    docs: list[object] = [config]
    if member:
        docs.extend(member_kwok_docs())
    return yaml.safe_dump_all(docs, sort_keys=False)


def member_kwok_docs() -> list[object]:
    """What a member's kwok plays: the fleet's pod stages, and every pod's log."""
    docs: list[object] = [d for d in yaml.safe_load_all(STAGES.read_text()) if d]
    docs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
                 "metadata": {"name": "fleet-pod-log"},
                 "spec": {"logs": [{"logsFile": str(POD_LOG)}]}})
    return docs


class Kwokctl:
    """kwokctl with one work directory per cluster: clusters created in parallel must not
    share kwokctl's PKI directory, or they race on its CA."""

    def __init__(self, binaries: Binaries, workdir: Path) -> None:
        self.binaries = binaries
        self.workdir = workdir
        self.root = workdir / "kwok"

    def env(self, name: str) -> dict[str, str]:
        env = {**os.environ, "KWOK_WORKDIR": str(self.root / name)}
        # kwokctl looks kubectl up on PATH first: put the one built with the servers there.
        env["PATH"] = f"{self.binaries.directory}{os.pathsep}{env.get('PATH', '')}"
        return env

    def pid_file(self, name: str, component: str) -> Path:
        return self.root / name / "clusters" / name / "pids" / f"{component}.pid"

    def run(self, name: str, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [self.binaries["kwokctl"], *args], env=self.env(name), timeout=timeout,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"kwokctl {' '.join(args)} failed:\n{done.stdout}")
        return done.stdout

    def pki(self, name: str) -> Path:
        return self.root / name / "clusters" / name / "pki"

    def start_create(self, name: str, *, member: bool, log: Path, ports: list[int],
                     audit_policy: Path | None = None,
                     real: RealNodeSettings | None = None) -> subprocess.Popen[bytes]:
        config = self.workdir / f"{name}.kwokctl.yaml"
        config.write_text(kwokctl_config(self.binaries, member=member, ports=ports,
                                         audit_policy=audit_policy, real=real,
                                         pki=self.pki(name)))
        scratch = self.workdir / f"{name}.kwokctl-kubeconfig"
        return subprocess.Popen(
            [self.binaries["kwokctl"], "create", "cluster", "--name", name, "--config", str(config),
             "--kubeconfig", str(scratch), "--wait", "3m"],
            env=self.env(name), stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )

    def kubeconfig(self, name: str) -> str:
        return self.run(name, "get", "kubeconfig", "--name", name)

    def delete(self, name: str) -> None:
        scratch = self.workdir / f"{name}.kwokctl-kubeconfig"
        self.run(name, "delete", "cluster", "--name", name, "--kubeconfig", str(scratch))

    def clusters(self) -> list[str]:
        """Clusters with a work directory under this fleet's root."""
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "clusters" / p.name).exists())
