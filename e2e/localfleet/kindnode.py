"""The kind node image, assembled here without a registry.

``kind build node-image`` cannot run on a machine without a registry: it drives the ``docker``
CLI and fetches etcd, CoreDNS, pause, kindnetd and local-path-provisioner from registries
(``ctr content fetch``) on top of a base image that itself comes from a registry. So the image
is written directly, as a docker-archive that ``podman load`` reads, with what a kind node
needs (the contract kind's ``create cluster`` relies on):

* a Debian root filesystem with systemd, containerd, runc, the CNI plugins, iptables and
  conntrack (debootstrap from the machine's mirror; one cached layer);
* ``/usr/bin/kubeadm``, ``kubelet``, ``kubectl``, ``kube-proxy`` built from the pinned Kubernetes
  module, ``/kind/version``, a kubelet unit with kubeadm's drop-in;
* the control-plane images kubeadm asks for (kube-apiserver, kube-controller-manager,
  kube-scheduler, etcd, pause) under the names ``kubeadm config images list`` prints, each a
  static binary in a layer of its own, imported into the node's containerd at boot by a
  oneshot unit that the kubelet waits for (kubeadm finds them and pulls nothing);
* a bridge CNI configuration (clusters have one node: no kindnetd) and kube-proxy as a node
  service (no kube-proxy image, which would need iptables inside it); the cluster
  configuration (``kindfleet.py``) disables kind's default CNI, kube-proxy addon and CoreDNS.

The settings this VM needs (cgroup v1, no CAP_SYS_RESOURCE) are those of the real nodes:
containerd's ``restrict_oom_score_adj`` and the kubelet's ``failCgroupV1: false``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from e2e.localfleet import images

NODE_IMAGE_REPOSITORY = "fleet.local/kind-node"
DEBIAN_PACKAGES = ("systemd", "systemd-sysv", "dbus", "containerd", "runc",
                   "containernetworking-plugins", "iptables", "conntrack", "iproute2", "ethtool",
                   "socat", "kmod", "procps", "ca-certificates", "util-linux", "mount")
POD_SUBNET = "10.244.0.0/16"  # every cluster's, each node a /24 of it (``node_pod_subnet``)
CNI_CONFIG_PATH = "/etc/cni/net.d/10-fleet.conflist"
KUBELET_KUBECONFIG = "/etc/kubernetes/kubelet.conf"
KUBELET_CLIENT_PEM = "/var/lib/kubelet/pki/kubelet-client-current.pem"
PROXY_KUBECONFIG = "/etc/kubernetes/kube-proxy.conf"
# Bump when the way the node image is built changes (BASE_RECIPE: its Debian layer).
RECIPE = 3
BASE_RECIPE = 1

ENTRYPOINT = """#!/bin/sh
# The node container's first process: what systemd and the kubelet need of the container,
# then systemd.
set -e
# The kubelet and containerd mount volumes that must propagate.
mount --make-rshared /
# Every node of one image needs a machine id of its own.
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null 2>&1 || true
# kind waits for this line (on cgroup v1) or for systemd's multi-user target before it execs
# into the node.
[ -f /sys/fs/cgroup/cgroup.controllers ] || echo "INFO: detected cgroup v1"
exec "$@"
"""

KUBELET_CGROUPS = """#!/bin/sh
# The kubelet's cgroupRoot (/kubelet, kind's setting) in every cgroup v1 hierarchy: with the
# cgroupfs driver the kubelet requires it to exist; cpuset needs its cpus and mems set first.
# Hierarchies podman mounts read-only are ones the kubelet does not ask for.
for d in /sys/fs/cgroup/*; do
  [ -L "$d" ] && continue
  case "$d" in */unified) continue ;; esac
  mkdir -p "$d/kubelet" 2>/dev/null || true
done
if [ -d /sys/fs/cgroup/cpuset/kubelet ]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > /sys/fs/cgroup/cpuset/kubelet/cpuset.cpus
  cat /sys/fs/cgroup/cpuset/cpuset.mems > /sys/fs/cgroup/cpuset/kubelet/cpuset.mems
fi
"""

CONTAINERD_CONFIG = """version = 2
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  # This VM's capability bounding set lacks CAP_SYS_RESOURCE: without it no sandbox starts.
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = false
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "/etc/cni/net.d"
"""

IMAGES_UNIT = """[Unit]
Description=Import the control-plane images into containerd
After=containerd.service
Requires=containerd.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'until ctr version >/dev/null 2>&1; do sleep 0.2; done; \
for f in /kind/images/*.tar; do ctr -n k8s.io images import "$f" >/dev/null || exit 1; done'
[Install]
WantedBy=multi-user.target
"""

KUBELET_UNIT = """[Unit]
Description=kubelet
After=containerd.service fleet-images.service
Requires=fleet-images.service
[Service]
ExecStart=/usr/bin/kubelet
Restart=always
RestartSec=1s
StartLimitInterval=0
[Install]
WantedBy=multi-user.target
"""

# kubeadm's drop-in: the flags and files kubeadm writes before it (re)starts the kubelet.
KUBELET_DROPIN = """[Unit]
# Skipped at boot (the boot reaches its target); kubeadm starts it once it wrote the config.
ConditionPathExists=/var/lib/kubelet/config.yaml
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
ExecStartPre=/usr/local/bin/kubelet-cgroups
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""  # noqa: E501

KUBE_PROXY_UNIT = f"""[Unit]
Description=kube-proxy (a node service: no kube-proxy image here)
After=kubelet.service
[Service]
# Waits in its own process (not in ExecStartPre, which would hold the boot) for kubeadm, then
# runs as system:kube-proxy (the bootstrap policy's node-proxier), never as the admin: kubeadm
# signs it a client certificate with the cluster's CA.
ExecStart=/bin/sh -c 'until [ -f /etc/kubernetes/admin.conf ]; do sleep 1; done; \
[ -s {PROXY_KUBECONFIG} ] || {{ kubeadm kubeconfig user --config=/kind/kubeadm.conf \
--client-name=system:kube-proxy \
> {PROXY_KUBECONFIG}.new && mv {PROXY_KUBECONFIG}.new {PROXY_KUBECONFIG}; }} || exit 1; \
exec /usr/bin/kube-proxy --kubeconfig={PROXY_KUBECONFIG} --proxy-mode=iptables \
--cluster-cidr={POD_SUBNET} --hostname-override=%H --conntrack-max-per-core=0 --conntrack-min=0 \
--conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0'
Restart=always
RestartSec=1s
StartLimitInterval=0
[Install]
WantedBy=multi-user.target
"""

def node_pod_subnet(index: int) -> str:
    """The pod addresses of the ``index``-th cluster's node: distinct per cluster, so that the
    host and the other clusters' nodes can route to a Pod by its IP (the hub's API server
    reaches an agent's log endpoint, the tests a Pod's /metrics), as with real nodes."""
    return f"10.244.{index}.0/24"


def cni_config(subnet: str) -> str:
    """A bridge network (clusters have one node: no kindnetd) over ``subnet``."""
    return json.dumps({
        "cniVersion": "0.4.0", "name": "fleet-kind",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=2)


COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")


def _base_layer(say: Callable[[str], None]) -> Path:
    """Debian with systemd and the container runtime, as one cached layer."""
    out = images._cached("kind-node-base-layer",
                         f"{BASE_RECIPE} {images.DEBIAN_SUITE} {DEBIAN_PACKAGES}")
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=images.CACHE) as tmp:
        root = Path(tmp) / "root"
        say(f"kind node image: debootstrap {images.DEBIAN_SUITE} with systemd and containerd "
            "(a few minutes, once)")
        subprocess.run(["debootstrap", "--variant=minbase",
                        f"--include={','.join(DEBIAN_PACKAGES)}",
                        images.DEBIAN_SUITE, str(root), images._debian_mirror()],
                       check=True, stdout=subprocess.DEVNULL)
        layer = Path(tmp) / "layer.tar"
        images.layer_from_dir(root, layer, skip=images._prune)
        layer.rename(out)
    return out


def required_images(kubeadm: Path, version: str) -> dict[str, str]:
    """kubeadm's image for each control-plane component and the pause image, by component."""
    listed = subprocess.run([str(kubeadm), "config", "images", "list",
                             "--kubernetes-version", version],
                            check=True, capture_output=True, text=True).stdout.split()
    found = {}
    for name in listed:
        component = name.rsplit("/", 1)[-1].split(":", 1)[0]
        if component in (*COMPONENTS, "pause"):
            found[component] = name
    missing = {*COMPONENTS, "pause"} - set(found)
    if missing:
        raise RuntimeError(f"kubeadm config images list names no {sorted(missing)}: {listed}")
    return found


def _binary_image(out: Path, name: str, binary: Path, cmd: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "usr/local/bin").mkdir(parents=True)
        shutil.copy2(binary, root / "usr/local/bin" / binary.name)
        (root / "tmp").mkdir(mode=0o1777)
        layer = Path(tmp) / "layer.tar"
        images.layer_from_dir(root, layer)
        images.write_archive(out, name, [layer], cmd=cmd)


def _write(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def _kind_layer(root: Path, version: str, binaries: dict[str, Path],
                component_images: dict[str, str], pause_archive: Path) -> None:
    """Everything above the Debian layer, written under ``root``."""
    for name in ("kubeadm", "kubelet", "kubectl", "kube-proxy"):
        target = root / "usr/bin" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binaries[name], target)
        target.chmod(0o755)
    _write(root, "/kind/version", version + "\n")
    image_dir = root / "kind/images"
    image_dir.mkdir(parents=True)
    for component in COMPONENTS:
        _binary_image(image_dir / f"{component}.tar", component_images[component],
                      binaries[component], [component])
    shutil.copy2(pause_archive, image_dir / "pause.tar")
    _write(root, "/usr/local/bin/entrypoint", ENTRYPOINT, 0o755)
    _write(root, "/usr/local/bin/kubelet-cgroups", KUBELET_CGROUPS, 0o755)
    _write(root, "/etc/containerd/config.toml",
           CONTAINERD_CONFIG.format(pause=component_images["pause"]))
    # The first cluster's; the others are given theirs before their first Pod (kindfleet.py).
    _write(root, CNI_CONFIG_PATH, cni_config(node_pod_subnet(0)))
    units = {"fleet-images.service": IMAGES_UNIT, "kubelet.service": KUBELET_UNIT,
             "kube-proxy.service": KUBE_PROXY_UNIT}
    for unit, text in units.items():
        _write(root, f"/etc/systemd/system/{unit}", text)
        wants = root / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(parents=True, exist_ok=True)
        (wants / unit).symlink_to(f"/etc/systemd/system/{unit}")
    _write(root, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBELET_DROPIN)


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    extracted = tar.extractfile(name)
    if extracted is None:
        raise RuntimeError(f"{name} is not a file in {tar.name!r}")
    return extracted.read()


def _pause_archive(name: str) -> Path:
    """The local pause image under kubeadm's name (containerd's sandbox image)."""
    pause = images.pause_image()
    out = images._cached("kind-pause", f"{RECIPE} {pause.archive.name} {name}")
    if not out.exists():
        with tempfile.TemporaryDirectory() as tmp:
            layer = Path(tmp) / "layer.tar"
            with tarfile.open(pause.archive) as tar:
                manifest = json.loads(_member(tar, "manifest.json"))
                layer.write_bytes(_member(tar, manifest[0]["Layers"][0]))
            images.write_archive(out, name, [layer], cmd=["/pause"], user="65535:65535")
    return out


def node_image(binaries: dict[str, Path], version: str,
               say: Callable[[str], None] = print) -> images.Image:
    """The node image archive for Kubernetes ``version`` from ``binaries`` (kubeadm, kubelet,
    kubectl, kube-proxy, kube-apiserver, kube-controller-manager, kube-scheduler, etcd)."""
    base = _base_layer(say)
    component_images = required_images(binaries["kubeadm"], version)
    key = hashlib.sha256(f"{RECIPE} {base.name} {version} {component_images}".encode())
    for text in (ENTRYPOINT, KUBELET_CGROUPS, CONTAINERD_CONFIG, IMAGES_UNIT, KUBELET_UNIT,
                 KUBELET_DROPIN, KUBE_PROXY_UNIT, cni_config(node_pod_subnet(0))):
        key.update(text.encode())
    for name in sorted(binaries):
        key.update(f"{name} {binaries[name].stat().st_size} {binaries[name].stat().st_mtime_ns}"
                   .encode())
    tag = key.hexdigest()[:12]
    name = f"{NODE_IMAGE_REPOSITORY}:{version}-{tag}"
    out = images._cached("kind-node", tag)
    if out.exists():
        return images.Image(name, out)
    say(f"kind node image {name}: assembling")
    pause = _pause_archive(component_images["pause"])
    with tempfile.TemporaryDirectory(dir=images.CACHE) as tmp:
        root = Path(tmp) / "root"
        _kind_layer(root, version, binaries, component_images, pause)
        layer = Path(tmp) / "layer.tar"
        images.layer_from_dir(root, layer)
        images.write_archive(out, name, [base, layer],
                             cmd=["/usr/local/bin/entrypoint", "/sbin/init"],
                             env=["container=podman"])
    return images.Image(name, out)
