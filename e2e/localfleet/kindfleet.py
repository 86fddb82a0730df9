"""The kind backend of the local fleet: every cluster a kind cluster on podman.

``FLEET_BACKEND=kind`` (``make up BACKEND=kind``) gives the hub and each member a one-node kind
cluster (kind built from its pinned module by ``e2e/toolchain/build-kind.sh``, its node image
assembled here by ``kindnode.py``, podman as kind's provider). fleet's images are loaded with
``kind load image-archive``; the hub Deployment and the agent DaemonSet from ``deploy/`` run on
the kind nodes as Pods (``pods.py``, as with real nodes); a kwok controller per member, a host
process, fakes the GPU nodes (annotated ones only, never the kind node).

podman on this VM needs a containers.conf with no default ulimits (it cannot raise limits) and
runc as its runtime; ``Kind`` points podman (and kind's calls of it) at one in the fleet's work
directory.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e.localfleet import images, kindnode
from e2e.localfleet.kwok import Binaries, free_ports, member_kwok_docs
from e2e.localfleet.realnode import REAL_NODE_LABEL

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = """# written by e2e/localfleet/kindfleet.py
[containers]
# podman raises the open-files limit of every container by default; this VM cannot.
default_ulimits = []
[engine]
# crun refuses kind's private cgroup namespace on a hybrid cgroup v1/v2 host; runc does not.
runtime = "runc"
"""
API_SERVER_PORT = 6443
INOTIFY_INSTANCES = 512
# The flag that tells the kwok controllers started here from any other process.
KWOK_MARK = "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake"


def unavailable_reason() -> str | None:
    """Why kind clusters cannot run here, in one line; None when they can."""
    if os.geteuid() != 0:
        return "the kind backend runs podman as root here (rootless podman is not set up)"
    missing = [tool for tool in ("podman", "runc", "debootstrap", "go", "gcc")
               if not shutil.which(tool)]
    if missing:
        return f"the kind backend needs {', '.join(missing)} (scripts/kind-packages.sh)"
    return None


def build_kind() -> Path:
    """The directory of kind and kubeadm built from e2e/toolchain/kind (cached)."""
    out = subprocess.run(["bash", str(REPO / "e2e" / "toolchain" / "build-kind.sh")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def build_node_binaries() -> Path:
    out = subprocess.run(["bash", str(REPO / "e2e" / "toolchain" / "build-node.sh")],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return Path(out.strip().splitlines()[-1])


class Kind:
    """The kind CLI with podman as its provider."""

    def __init__(self, directory: Path, workdir: Path) -> None:
        self.directory = directory
        self.workdir = workdir
        conf = workdir / "containers.conf"
        if not conf.exists():
            conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "podman",
                    "CONTAINERS_CONF": str(conf)}

    def run(self, *args: str, stdin: str | None = None, timeout: float = 600) -> str:
        done = subprocess.run([str(self.directory / "kind"), *args], env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"kind {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def podman(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args)} failed:\n{done.stderr}")
        return done.stdout

    @staticmethod
    def ensure_host() -> None:
        """What kind nodes need of the host. kind mounts the host's /lib/modules into its nodes:
        a VM whose kernel has no module directory gets an empty one (podman refuses a missing
        mount source). Each node's systemd takes inotify instances from root's allowance (128
        by default, shared with everything else root runs): without more, a node's systemd
        exits with "Failed to allocate manager object: Too many open files" (kind's known
        issues give the same advice)."""
        Path("/lib/modules").mkdir(exist_ok=True)
        limit = Path("/proc/sys/fs/inotify/max_user_instances")
        if int(limit.read_text()) < INOTIFY_INSTANCES:
            limit.write_text(str(INOTIFY_INSTANCES))

    def exists(self, kind: str, name: str) -> bool:
        """Whether podman has the ``kind`` (image, network, ...) called ``name``."""
        return subprocess.run(["podman", kind, "exists", name], env=self.env, check=False,
                              capture_output=True).returncode == 0

    def ensure_image(self, image: images.Image) -> None:
        if not self.exists("image", image.name):
            self.podman("load", "-i", str(image.archive))

    def start_create(self, name: str, config: dict[str, Any], log: Path) -> subprocess.Popen[bytes]:
        path = self.workdir / f"{name}.kind.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return subprocess.Popen(
            [str(self.directory / "kind"), "create", "cluster", "--name", name,
             "--config", str(path), "--kubeconfig", str(self.workdir / f"{name}.kind-kubeconfig"),
             "--retain", "--wait", "0s"],
            env=self.env, stdout=log.open("wb"), stderr=subprocess.STDOUT)

    def await_network(self, creating: subprocess.Popen[bytes], timeout: float = 120) -> None:
        """Wait until the first ``kind create cluster`` has made kind's podman network (or
        ended): clusters created side by side on a machine without it each try to make it,
        and all but one fail with "network name kind already used"."""
        name = self.env.get("KIND_EXPERIMENTAL_PODMAN_NETWORK", "kind")
        deadline = time.monotonic() + timeout
        while creating.poll() is None and time.monotonic() < deadline:
            if self.exists("network", name):
                return
            time.sleep(0.5)

    def clusters(self) -> list[str]:
        return self.run("get", "clusters").split()

    def delete(self, name: str) -> None:
        self.run("delete", "cluster", "--name", name)

    def kubeconfig(self, name: str) -> str:
        return self.run("get", "kubeconfig", "--name", name)

    def reusable(self, name: str, image: str) -> bool:
        """Whether kind cluster ``name`` runs a node of ``image`` (then ``up`` keeps it: a warm
        start need not wait for kubeadm again)."""
        try:
            inspected = json.loads(self.podman("inspect", self.node(name), timeout=30))
        except (RuntimeError, subprocess.TimeoutExpired):
            return False
        return bool(inspected and inspected[0].get("ImageName") == image
                    and inspected[0].get("State", {}).get("Running"))

    def node(self, name: str) -> str:
        return f"{name}-control-plane"

    def node_ip(self, name: str) -> str:
        inspected = json.loads(self.podman("inspect", self.node(name)))
        networks = inspected[0]["NetworkSettings"]["Networks"]
        return str(networks["kind"]["IPAddress"])

    def exec(self, name: str, *argv: str, stdin: str | None = None, timeout: float = 60) -> str:
        """Run ``argv`` on ``name``'s node (in its namespaces, as its root)."""
        done = subprocess.run(["podman", "exec", "-i", self.node(name), *argv], env=self.env,
                              input=stdin, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{self.node(name)}: {' '.join(argv)} failed:\n{done.stderr}")
        return done.stdout

    def pod_subnet(self, name: str) -> str | None:
        """The subnet the node's bridge network gives its Pods."""
        try:
            config = json.loads(self.exec(name, "cat", kindnode.CNI_CONFIG_PATH))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired):
            return None
        return str(config["plugins"][0]["ipam"]["ranges"][0][0]["subnet"])

    def set_pod_subnet(self, name: str, subnet: str) -> None:
        """Before the node's first Pod: containerd reads the CNI configuration at each Pod."""
        self.exec(name, "sh", "-c", f"cat > {kindnode.CNI_CONFIG_PATH}",
                  stdin=kindnode.cni_config(subnet))

    def route_pods(self, subnets: dict[str, str]) -> None:
        """Routes to each cluster's Pods through its node, on this host and on every other
        node (kind's network joins the nodes; it knows nothing of their Pods)."""
        addresses = {name: self.node_ip(name) for name in subnets}
        for name, subnet in subnets.items():
            subprocess.run(["ip", "route", "replace", subnet, "via", addresses[name]],
                           check=True, capture_output=True)
            for other in subnets:
                if other != name:
                    self.exec(other, "ip", "route", "replace", subnet, "via", addresses[name])

    def gateway(self) -> str:
        """This host's address on kind's network (where the nodes reach host processes)."""
        inspected = json.loads(self.podman("network", "inspect", "kind"))
        # kind's network has an IPv6 subnet too (first): kwok's flags want an IPv4 address
        return next(str(subnet["gateway"]) for subnet in inspected[0]["subnets"]
                    if ipaddress.ip_address(subnet["gateway"]).version == 4)

    def task_pids(self, name: str) -> dict[str, int]:
        """The node's running containers' main processes, by container id, as this host sees
        them (containerd inside the node answers with the node's own pid namespace)."""
        listed = self.exec(name, "ctr", "--namespace", "k8s.io", "tasks", "ls")
        in_node = {}
        for line in listed.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "RUNNING" and fields[1].isdigit():
                in_node[int(fields[1])] = fields[0]
        return {container: host_pid for host_pid, node_pid in self._node_pids(name).items()
                if (container := in_node.get(node_pid))}

    def _node_pids(self, name: str) -> dict[int, int]:
        """Host pid -> pid in the node's namespace, for every process in the node container
        (its own and its Pods' containers', which run in pid namespaces of their own below
        the node's: NSpid lists a process's pid from the host's namespace inwards)."""
        container = self.podman("inspect", "--format", "{{.Id}}", self.node(name)).strip()
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if container not in (entry / "cgroup").read_text():
                    continue
                for line in (entry / "status").read_text().splitlines():
                    fields = line.split()[1:]
                    if line.startswith("NSpid:") and len(fields) >= 2:
                        found[int(entry.name)] = int(fields[1])
            except OSError:
                continue  # ended meanwhile
        return found

    def component_pid(self, name: str, component: str) -> int:
        """The host pid of a control-plane process on ``name``'s node (a static Pod's
        container: ``kube-apiserver``, ``etcd``...)."""
        for host_pid in sorted(self._node_pids(name)):
            try:
                argv0 = Path(f"/proc/{host_pid}/cmdline").read_bytes().split(b"\0", 1)[0]
            except OSError:
                continue
            if Path(argv0.decode(errors="replace")).name == component:
                return host_pid
        raise LookupError(f"no {component} process on {self.node(name)}")

    def kill_container(self, name: str, container_id: str, sig: signal.Signals) -> None:
        """Signal a container's main process through the node's containerd, as a crash or the
        OOM killer would end it (the kubelet restarts it)."""
        self.exec(name, "ctr", "--namespace", "k8s.io", "tasks", "kill", "--signal", sig.name,
                  container_id)

    def kubelet_kubeconfig(self, name: str, server_kubeconfig: str) -> str:
        """The node's kubelet identity (its certificate, which kubeadm keeps in a file) in a
        kubeconfig that reaches the API server as ``server_kubeconfig`` does."""
        pem = self.exec(name, "cat", kindnode.KUBELET_CLIENT_PEM)
        # The file holds the certificate and its key, one PEM block each.
        blocks = {match.group(1): match.group(0)
                  for match in re.finditer(r"-----BEGIN ([A-Z ]+)-----.*?-----END \1-----\n?",
                                           pem, re.S)}
        cert = blocks.pop("CERTIFICATE")
        key = next(iter(blocks.values()))
        config = yaml.safe_load(server_kubeconfig)
        config["users"] = [{"name": "kubelet", "user": {
            "client-certificate-data": base64.b64encode(cert.encode()).decode(),
            "client-key-data": base64.b64encode(key.encode()).decode()}}]
        for context in config["contexts"]:
            context["context"]["user"] = "kubelet"
        return str(yaml.safe_dump(config))

    def proxy_kubeconfig(self, name: str) -> str:
        return self.exec(name, "cat", kindnode.PROXY_KUBECONFIG)

    def load(self, name: str, archive: Path) -> None:
        self.run("load", "image-archive", str(archive), "--name", name)

    def logs_hint(self, name: str) -> str:
        return (f"podman exec {self.node(name)} journalctl -u kubelet -u containerd "
                f"-u fleet-images --no-pager | tail")


def cluster_config(image: str, *, member: bool) -> dict[str, Any]:
    """One control-plane node that also runs the cluster's Pods, labelled as the fleet's real
    node; members taint it, so that only the agent (which tolerates it) runs there and jobs go
    to the kwok nodes."""
    registration: dict[str, Any] = {"ignorePreflightErrors": ["all"]}
    if member:
        # kubeadm's own taint too: kind removes it from a one-node cluster and fails if absent.
        registration["taints"] = [
            {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
            {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}]
    init = {"kind": "InitConfiguration", "nodeRegistration": registration,
            # No kube-proxy image (kube-proxy is a node service) and no CoreDNS image.
            "skipPhases": ["addon/kube-proxy", "addon/coredns"],
            # Three clusters start at once on a shared 2-core machine: kubeadm's 4 minutes
            # for the control plane to come up are not always enough.
            "timeouts": {"controlPlaneComponentHealthCheck": "10m0s",
                         "kubeletHealthCheck": "10m0s", "kubernetesAPICall": "10m0s"}}
    # Throwaway test clusters on a shared disk: etcd need not fsync.
    cluster = {"kind": "ClusterConfiguration", "etcd": {"local": {"extraArgs": [
        {"name": "unsafe-no-fsync", "value": "true"}]}}}
    kubelet = {"kind": "KubeletConfiguration", "failCgroupV1": False,
               "cgroupDriver": "cgroupfs", "localStorageCapacityIsolation": False}
    return {
        "kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"disableDefaultCNI": True, "kubeProxyMode": "none",
                       "podSubnet": kindnode.POD_SUBNET, "apiServerAddress": "127.0.0.1"},
        "nodes": [{"role": "control-plane", "image": image,
                   "labels": {REAL_NODE_LABEL: "true"}}],
        "kubeadmConfigPatches": [yaml.safe_dump(doc) for doc in (init, cluster, kubelet)],
    }


def node_image(binaries: Binaries, node_binaries: Path, kind_binaries: Path,
               say: Callable[[str], None]) -> images.Image:
    paths = {name: binaries.directory / name for name in
             ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd")}
    paths.update({name: node_binaries / name for name in ("kubelet", "kube-proxy")})
    paths["kubeadm"] = kind_binaries / "kubeadm"
    version = subprocess.run([str(paths["kubeadm"]), "version", "-o", "short"], check=True,
                             capture_output=True, text=True).stdout.strip()
    return kindnode.node_image(paths, version, say)


def internal_kubeconfig(kubeconfig: str, address: str) -> str:
    """``kubeconfig`` with its server at ``address`` (the node's address on kind's network,
    which Pods of every kind cluster reach; it is in the API server's certificate)."""
    config = yaml.safe_load(kubeconfig)
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://{address}:{API_SERVER_PORT}"
    return yaml.safe_dump(config)


def kwok_config(path: Path) -> Path:
    """kwok's configuration: the fleet's pod stages and every pod's log (as kwokctl gives the
    local backend's members)."""
    path.write_text(yaml.safe_dump_all(member_kwok_docs(), sort_keys=False))
    return path


def kwok_argv(binaries: Binaries, kubeconfig: Path, address: str, config: Path) -> list[str]:
    """A kwok controller on the host for one member: it fakes the annotated GPU nodes and the
    Pods bound to them with the fleet's stages, and serves their logs as a kubelet would at
    ``address`` (this host on kind's network: the member's API server calls it there)."""
    port = free_ports(1)[0]
    return [binaries["kwok"], f"--kubeconfig={kubeconfig}", f"--config={config}",
            "--manage-all-nodes=false",
            KWOK_MARK,
            "--node-lease-duration-seconds=40", f"--server-address={address}:{port}",
            f"--node-ip={address}", f"--node-port={port}"]
