"""Real nodes for the local fleet: containerd + kubelet + kube-proxy in a network namespace.

Every cluster of a local fleet gets one real node. The node's processes run in a network
namespace of their own (``ip netns``) joined to the host by a veth pair with a private /24, so
several clusters' kube-proxies never share iptables chains and every node has the usual ports.
The API servers keep listening on 127.0.0.1 (kwokctl's components talk there); the host
forwards the host end of each veth (the address the API server advertises, the ``kubernetes``
Service's endpoint) to it, for packets that come from the fleet's nodes only (a nat chain of
the fleet's own, ``route_localnet`` on its veths). The host routes each node's pod subnet to the
node, so the API server reaches webhooks and kubelets. Each cluster has its own service CIDR.

Addresses of fleet slot ``s`` (one per local fleet running at once) and cluster ``i``:
``10.(208+s).i.1`` host end / ``.2`` node end, pods ``10.(208+s).(64+i).0/24``, services
``10.(208+s).(128+i).0/24``. Nothing is routed beyond these namespaces.

What makes it work on a root VM with cgroup v1 and no CAP_SYS_RESOURCE: containerd's
``restrict_oom_score_adj``, the kubelet's ``failCgroupV1: false`` and a ``cgroupRoot`` per
kubelet created in every v1 controller (docs/local-fleet.md).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

CNI_BIN_DIRS = (Path("/usr/lib/cni"), Path("/opt/cni/bin"))
CGROUP_V1 = Path("/sys/fs/cgroup")
# The kubelet binds its device-plugin registration socket here whatever its --root-dir.
DEVICE_PLUGIN_SOCKET = Path("/var/lib/kubelet/device-plugins/kubelet.sock")
NETNS_DIR = Path("/run/netns")
MAX_SLOTS = 16
REAL_NODE_LABEL = "fleet.local/real-node"


def unavailable_reason() -> str | None:
    """Why this machine cannot run real nodes, in one line; None when it can."""
    if os.geteuid() != 0:
        return "real nodes need root (network namespaces, cgroups, mounts)"
    if not (CGROUP_V1 / "memory").is_dir() and not (CGROUP_V1 / "cgroup.controllers").exists():
        return "real nodes need cgroups (no cgroup v1 memory controller or cgroup v2 mounted)"
    if (CGROUP_V1 / "cgroup.controllers").exists():
        return "real nodes are set up for cgroup v1 here; this machine runs cgroup v2 only"
    missing = [tool for tool in ("containerd", "containerd-shim-runc-v2", "runc", "ctr",
                                 "iptables", "nsenter", "ip")
               if shutil.which(tool) is None]
    if cni_bin_dir() is None:
        missing.append("CNI plugins")
    if missing:
        return f"real nodes need {', '.join(missing)} (scripts/node-packages.sh installs them)"
    return None


# Each kubelet (cAdvisor, certificate and plugin watchers) and containerd holds several inotify
# instances; the kernel's default of 128 per user runs out with a few nodes on one host and
# the kubelet then dies ("inotify_init: too many open files"). kind asks for the same.
INOTIFY_MINIMUM = {"fs.inotify.max_user_instances": 512, "fs.inotify.max_user_watches": 524288}


def raise_inotify_limits() -> list[str]:
    """Raise the host's inotify limits to ``INOTIFY_MINIMUM`` (never lower them); what
    was raised, as ``name=value``."""
    raised = []
    for name, minimum in INOTIFY_MINIMUM.items():
        path = Path("/proc/sys") / name.replace(".", "/")
        if int(path.read_text()) < minimum:
            path.write_text(str(minimum))
            raised.append(f"{name}={minimum}")
    return raised


def cni_bin_dir() -> Path | None:
    return next((d for d in CNI_BIN_DIRS if (d / "bridge").exists()), None)


def free_slot() -> int:
    """A fleet slot no running local fleet uses (by its network namespaces)."""
    used = {int(p.name[5:].split("-", 1)[0]) for p in NETNS_DIR.glob("fleet*-*")
            if p.name[5:].split("-", 1)[0].isdigit()} if NETNS_DIR.exists() else set()
    for slot in range(MAX_SLOTS):
        if slot not in used:
            return slot
    raise RuntimeError(f"all {MAX_SLOTS} real-node fleet slots are in use (ip netns list)")


@dataclass(frozen=True)
class NodeNetwork:
    slot: int
    index: int
    cluster: str

    @property
    def prefix(self) -> str:
        return f"10.{208 + self.slot}"

    @property
    def host_ip(self) -> str:
        return f"{self.prefix}.{self.index}.1"

    @property
    def node_ip(self) -> str:
        return f"{self.prefix}.{self.index}.2"

    @property
    def pod_cidr(self) -> str:
        return f"{self.prefix}.{64 + self.index}.0/24"

    @property
    def service_cidr(self) -> str:
        return f"{self.prefix}.{128 + self.index}.0/24"

    @property
    def kubernetes_service_ip(self) -> str:
        return f"{self.prefix}.{128 + self.index}.1"

    @property
    def netns(self) -> str:
        return f"fleet{self.slot}-{self.cluster}"

    @property
    def host_link(self) -> str:
        return f"fl{self.slot}h{self.index}"

    @property
    def node_name(self) -> str:
        return f"{self.cluster}-real"

    @property
    def cgroup_root(self) -> str:
        return f"/{self.netns}"

    def create(self) -> None:
        self.delete()
        _run("ip", "netns", "add", self.netns)
        _run("ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "eth0",
             "netns", self.netns)
        _run("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.host_link)
        _run("ip", "link", "set", self.host_link, "up")
        inside = ("ip", "netns", "exec", self.netns)
        _run(*inside, "ip", "addr", "add", f"{self.node_ip}/24", "dev", "eth0")
        _run(*inside, "ip", "link", "set", "eth0", "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "route", "add", "default", "via", self.host_ip)
        _run(*inside, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _run("ip", "route", "add", self.pod_cidr, "via", self.node_ip)
        _run("sysctl", "-qw", f"net.ipv4.conf.{self.host_link}.route_localnet=1")

    @property
    def chain(self) -> str:
        return f"FLEET{self.slot}-APISERVERS"

    def expose_api_server(self, kubeconfig: Path) -> None:
        """Forward ``host_ip:<port>`` to the API server on 127.0.0.1, for the fleet's nodes."""
        port = _server_port(kubeconfig.read_text())
        nat = ("iptables", "-w", "-t", "nat")
        if subprocess.run([*nat, "-n", "-L", self.chain], capture_output=True,
                          check=False).returncode != 0:
            _run(*nat, "-N", self.chain)
            _run(*nat, "-A", "PREROUTING", "-i", f"fl{self.slot}h+", "-j", self.chain)
        _run(*nat, "-A", self.chain, "-d", self.host_ip, "-p", "tcp", "--dport", str(port),
             "-j", "DNAT", "--to-destination", f"127.0.0.1:{port}")

    def from_node(self, kubeconfig: str) -> str:
        """``kubeconfig`` (server 127.0.0.1) as the node and its pods reach the server."""
        return kubeconfig.replace("https://127.0.0.1:", f"https://{self.host_ip}:")

    def delete_chain(self) -> None:
        nat = ("iptables", "-w", "-t", "nat")
        subprocess.run([*nat, "-D", "PREROUTING", "-i", f"fl{self.slot}h+", "-j", self.chain],
                       capture_output=True, check=False)
        subprocess.run([*nat, "-F", self.chain], capture_output=True, check=False)
        subprocess.run([*nat, "-X", self.chain], capture_output=True, check=False)

    def delete(self) -> None:
        subprocess.run(["ip", "route", "del", self.pod_cidr], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, check=False)

    def create_cgroups(self) -> None:
        for controller in _v1_controllers():
            path = controller / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            if controller.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((controller / name).read_text())

    def delete_cgroups(self) -> None:
        for controller in _v1_controllers():
            root = controller / self.cgroup_root.lstrip("/")
            if not root.exists():
                continue
            for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -w[0].count("/")):
                for _ in range(50):
                    try:
                        os.rmdir(dirpath)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        _kill_cgroup(Path(dirpath))
                        time.sleep(0.1)


def _server_port(kubeconfig: str) -> int:
    config = yaml.safe_load(kubeconfig)
    server = str(config["clusters"][0]["cluster"]["server"])
    return int(server.rsplit(":", 1)[1].split("/", 1)[0])


def _v1_controllers() -> list[Path]:
    return [p for p in sorted(CGROUP_V1.iterdir())
            if p.is_dir() and not p.is_symlink() and p.name != "unified"
            and (p / "cgroup.procs").exists()]


def _kill_cgroup(path: Path) -> None:
    try:
        pids = (path / "cgroup.procs").read_text().split()
    except OSError:
        return
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.stdout.strip()}")


@dataclass(frozen=True)
class ClusterPki:
    ca: Path
    cert: Path
    key: Path
    ca_key: Path  # signs the node's own identities (``node_identity``)


class RealNode:
    """One node of one cluster: its files live in ``directory``; its processes are started
    through ``spawn(name, argv)`` (which records them for teardown). The kubelet runs with
    ``kubeconfig`` (the node's own identity), kube-proxy with ``proxy_kubeconfig``."""

    def __init__(self, network: NodeNetwork, directory: Path, kubeconfig: Path,
                 pki: ClusterPki, binaries: Path, *, taint: bool) -> None:
        self.net = network
        self.dir = directory
        self.kubeconfig = kubeconfig
        self.pki = pki
        self.binaries = binaries
        self.taint = taint

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def proxy_kubeconfig(self) -> Path:
        return self.dir / "kube-proxy.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.dir / "pod-logs"

    def nsenter(self, *argv: str) -> list[str]:
        # Only the network namespace: kubelet and containerd must share the host's mount
        # namespace, or containers would not see the volumes the kubelet mounts.
        return ["nsenter", f"--net={NETNS_DIR / self.net.netns}", "--", *argv]

    def ctr(self, *args: str) -> list[str]:
        return ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args]

    # -- configuration ---------------------------------------------------------------------
    def write_configs(self, pause_image: str) -> None:
        d = self.dir
        for sub in ("containerd/root", "containerd/state", "runc", "cni/conf", "cni/ipam",
                    "kubelet", "pod-logs"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (d / "containerd.toml").write_text(f"""version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{self.socket}"
[metrics]
  address = ""
[{cri}]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{d}/runc"
[{cri}.cni]
  bin_dir = "{cni_bin_dir()}"
  conf_dir = "{d}/cni/conf"
""")
        (d / "cni/conf/10-fleet.conflist").write_text(json.dumps({
            "cniVersion": "0.4.0", "name": f"fleet-{self.net.netns}",
            "plugins": [
                {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
                 "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": self.net.pod_cidr}]],
                          "routes": [{"dst": "0.0.0.0/0"}], "dataDir": f"{d}/cni/ipam"}},
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ]}, indent=2))
        kubelet = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "failCgroupV1": False, "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.net.cgroup_root, "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "address": self.net.node_ip, "healthzBindAddress": "127.0.0.1",
            "readOnlyPort": 0, "podLogsDir": str(self.pod_logs),
            # rotation would move a log away from the link the fleet keeps of it
            "containerLogMaxSize": "200Mi",
            "localStorageCapacityIsolation": False,
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.pki.ca)}},
            "authorization": {"mode": "Webhook"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "resolvConf": "/etc/resolv.conf",
            "registerWithTaints": ([{"key": REAL_NODE_LABEL, "value": "true",
                                     "effect": "NoSchedule"}] if self.taint else []),
        }
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet))
        proxy = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.proxy_kubeconfig)},
            "mode": "iptables", "clusterCIDR": self.net.pod_cidr,
            "hostnameOverride": self.net.node_name,
            "metricsBindAddress": "127.0.0.1:10249", "healthzBindAddress": "127.0.0.1:10256",
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
        }
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump(proxy))

    # -- processes -------------------------------------------------------------------------
    def containerd_argv(self) -> list[str]:
        return self.nsenter("containerd", "--config", str(self.dir / "containerd.toml"))

    def kubelet_argv(self) -> list[str]:
        return self.nsenter(
            str(self.binaries / "kubelet"), "--config", str(self.dir / "kubelet.yaml"),
            "--kubeconfig", str(self.kubeconfig), "--root-dir", str(self.dir / "kubelet"),
            "--hostname-override", self.net.node_name, "--node-ip", self.net.node_ip,
            "--node-labels", f"{REAL_NODE_LABEL}=true")

    def kube_proxy_argv(self) -> list[str]:
        return self.nsenter(str(self.binaries / "kube-proxy"),
                            "--config", str(self.dir / "kube-proxy.yaml"))

    def wait_for_containerd(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.socket.exists() and subprocess.run(
                    self.ctr("version"), capture_output=True, check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.net.node_name}: containerd did not answer on {self.socket}")

    def kill_container(self, container_id: str, sig: signal.Signals) -> None:
        """Signal a container's main process through containerd, as the OOM killer or a
        crash would end it (the kubelet then restarts it, as for any container)."""
        _run(*self.ctr("tasks", "kill", "--signal", sig.name, container_id))

    def task_pids(self) -> dict[str, int]:
        """Running containers' main processes (as this host sees them), by container id."""
        done = subprocess.run(self.ctr("tasks", "ls"), capture_output=True, text=True,
                              check=False)
        pids = {}
        for line in done.stdout.splitlines()[1:]:
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "RUNNING" and fields[1].isdigit():
                pids[fields[0]] = int(fields[1])
        return pids

    def import_image(self, archive: Path) -> None:
        _run(*self.ctr("images", "import", "--no-unpack=false", str(archive)))

    # -- teardown --------------------------------------------------------------------------
    def cleanup(self) -> None:
        """After the node's processes are stopped: kill what containerd left (shims and
        containers), unmount the node's mounts, delete cgroups and the network namespace."""
        socket = str(self.socket)
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if socket.encode() in cmdline or (str(self.dir / "containerd").encode()
                                              in b" ".join(cmdline)):
                try:
                    os.kill(int(proc.name), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.net.delete_cgroups()
        unmount_under(self.dir)
        self.net.delete()
        self.net.delete_chain()


def unmount_under(directory: Path) -> None:
    prefix = str(directory.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
