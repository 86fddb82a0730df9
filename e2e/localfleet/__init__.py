"""The local fleet: a hub and N members, each a real kube-apiserver on 127.0.0.1.

``LocalFleet(workdir).up()`` builds or finds the control-plane binaries, starts the clusters in
parallel with kwokctl, gives members fake GPU nodes, installs the CRDs, joins every member, and
starts the hub controller and one agent per member as separate processes. Kubeconfigs land in
``<workdir>/<cluster>.kubeconfig``; logs in ``<workdir>/logs``; ``down()`` stops everything.

With ``nodes="real"`` (``FLEET_NODES=real``) every cluster also gets a real node (containerd,
kubelet, kube-proxy; ``realnode.py``) and the hub Deployment and agent DaemonSet from
``deploy/`` run on them as Pods (``pods.py``); when the machine cannot run real nodes it says
why in one line and falls back to host processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.localfleet import identities, images, kindfleet, kindnode, node_identity, pods, realnode
from e2e.localfleet.kwok import PORT_OPTIONS, Binaries, Kwokctl, RealNodeSettings, free_ports
from e2e.localfleet.nodes import NodeShape, node_manifests
from e2e.localfleet.realnode import ClusterPki, NodeNetwork, RealNode, free_slot, unavailable_reason
from fleet import onboarding
from fleet.clients import resources as r
from fleet.clients.kube import Kube

REPO = Path(__file__).resolve().parents[2]
HUB = "hub"
DEFAULT_SHAPE = NodeShape(count=4, gpus=8)


def progress(message: str) -> None:
    print(f"[fleet {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class NodeFacts:
    """What the tests check of a cluster's node that runs fleet's Pods, on either backend."""

    name: str
    pod_cidr: str
    kubernetes_service_ip: str
    kubelet_kubeconfig: str  # the kubelet's own identity, reaching the API server from here
    proxy_kubeconfig: str  # kube-proxy's


KIND_KUBERNETES_SERVICE_IP = "10.96.0.1"  # kind's default service subnet, 10.96.0.0/16


@dataclass
class LocalFleet:
    workdir: Path
    members: dict[str, list[NodeShape]] = field(
        default_factory=lambda: {"member1": [DEFAULT_SHAPE], "member2": [DEFAULT_SHAPE]})
    say: Callable[[str], None] = progress
    hub_args: Sequence[str] = ()
    agent_args: Sequence[str] = ()
    # "real": a real node per cluster, the hub and agents as Pods on them; "host": processes.
    nodes: str = field(default_factory=lambda: os.environ.get("FLEET_NODES", "host"))
    # False: `up` leaves deploy/'s hub and agent objects (RBAC, namespaces, Service, webhook)
    # out, for the caller to install another way (the Helm charts: e2e/test_helm_install.py).
    install_shipped: bool = True
    # "local": control planes from binaries (kwokctl); "kind": kind clusters (kindfleet.py).
    backend: str = field(default_factory=lambda: os.environ.get("FLEET_BACKEND", "local"))

    def __post_init__(self) -> None:
        self.workdir = self.workdir.resolve()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._state_file = self.workdir / "state.json"

    # -- paths and clients ---------------------------------------------------------------
    def kubeconfig(self, cluster: str) -> Path:
        return self.workdir / f"{cluster}.kubeconfig"

    def agent_kubeconfig(self, cluster: str) -> Path:
        return self.workdir / f"{cluster}.agent-hub.kubeconfig"

    def identity_kubeconfig(self, cluster: str) -> Path:
        """The shipped ServiceAccount's credentials: fleet-hub on the hub, fleet-agent on a
        member (see ``identities``)."""
        return self.workdir / f"{cluster}.serviceaccount.kubeconfig"

    def client(self, cluster: str) -> Kube:
        return Kube(str(self.kubeconfig(cluster)))

    @property
    def clusters(self) -> list[str]:
        return [HUB, *self.members]

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def real_nodes(self) -> bool:
        """Whether this fleet runs real nodes (decided by ``up``)."""
        return bool(self._load().get("real"))

    def up(self, *, with_controllers: bool = True) -> None:
        if self.backend == "kind":
            self.up_kind(with_controllers=with_controllers)
            return
        started = time.monotonic()
        self.stop_processes()  # what an earlier `up` in this workdir left running
        binaries = self._binaries()
        self._save(clusters=self.clusters, binaries=str(binaries.directory))
        real = self._prepare_real_nodes() if self.nodes == "real" else False
        self.start_control_planes(binaries)
        if real:
            self.start_real_nodes()
        hub = self.client(HUB)
        self.say("installing CRDs and deploy/hub (RBAC, namespaces, Service, webhook) on the hub")
        onboarding.install_crds(hub, onboarding.crd_manifests())
        if self.install_shipped:
            identities.install_hub(hub, self.kubeconfig(HUB), self.identity_kubeconfig(HUB))
        for name, shapes in self.members.items():
            self.join(name, shapes)
        if with_controllers and real:
            self.deploy_pods()
        elif with_controllers:
            self.start_hub()
            for name in self.members:
                self.start_agent(name)
        self.say(f"fleet is up in {time.monotonic() - started:.1f}s: "
                 f"hub + {len(self.members)} members; kubeconfigs in {self.workdir}")

    def _binaries(self) -> Binaries:
        self.say("control-plane binaries: building or reusing the cached ones")
        return Binaries.build(REPO)

    # -- real nodes ----------------------------------------------------------------------
    def _prepare_real_nodes(self) -> bool:
        """Build the node binaries and images and create the nodes' network namespaces;
        False (after saying why) when this machine cannot run real nodes."""
        reason = unavailable_reason()
        if reason:
            self.say(f"no real nodes: {reason}; the hub and agents run as host processes")
            return False
        raised = realnode.raise_inotify_limits()
        if raised:
            self.say(f"raised the host's inotify limits for the kubelets: {', '.join(raised)}")
        self.say("node binaries and images: building or reusing the cached ones")
        node_binaries = subprocess.run(
            ["bash", str(REPO / "e2e" / "toolchain" / "build-node.sh")],
            check=True, stdout=subprocess.PIPE, text=True).stdout.strip().splitlines()[-1]
        built = [images.pause_image(), images.busybox_image(), images.fleet_image(self.say)]
        self._save(real={"slot": free_slot(), "node_binaries": node_binaries,
                         "images": {i.name: str(i.archive) for i in built}})
        for cluster in self.clusters:
            self.network(cluster).create()
        return True

    def network(self, cluster: str) -> NodeNetwork:
        return NodeNetwork(self._load()["real"]["slot"], self.clusters.index(cluster), cluster)

    def real_node(self, cluster: str) -> RealNode:
        state = self._load()
        pki = Kwokctl(Binaries(Path(state["binaries"])), self.workdir).pki(cluster)
        return RealNode(self.network(cluster), self.workdir / "nodes" / cluster,
                        self.workdir / f"{cluster}.node.kubeconfig",
                        ClusterPki(pki / "ca.crt", pki / "admin.crt", pki / "admin.key",
                                   pki / "ca.key"),
                        Path(state["real"]["node_binaries"]), taint=cluster != HUB)

    def node_facts(self, cluster: str) -> NodeFacts:
        """The node of ``cluster`` where fleet's Pods run: a real node, or the kind node."""
        if self.backend == "kind":
            kind = self.kind()
            return NodeFacts(kind.node(cluster), self.kind_pod_subnets()[cluster],
                             KIND_KUBERNETES_SERVICE_IP,
                             kind.kubelet_kubeconfig(cluster, self.kubeconfig(cluster).read_text()),
                             kind.proxy_kubeconfig(cluster))
        node = self.real_node(cluster)
        return NodeFacts(node.net.node_name, node.net.pod_cidr, node.net.kubernetes_service_ip,
                         node.kubeconfig.read_text().replace(f"https://{node.net.host_ip}:",
                                                             "https://127.0.0.1:"),
                         node.proxy_kubeconfig.read_text())

    def _real_settings(self, cluster: str, kwok: Kwokctl) -> RealNodeSettings | None:
        if not self._load().get("real"):
            return None
        net = self.network(cluster)
        return RealNodeSettings(advertise_address=net.host_ip, service_cidr=net.service_cidr,
                                cert_sans=(net.host_ip, net.kubernetes_service_ip),
                                pki=kwok.pki(cluster))

    def start_real_nodes(self, timeout: float = 180) -> None:
        t0 = time.monotonic()
        archives = self._load()["real"]["images"]
        nodes = [self.real_node(cluster) for cluster in self.clusters]
        for node in nodes:
            node.net.create_cgroups()
            node.write_configs(images.PAUSE)
            self._write_node_identities(node)
            self._spawn(f"{node.net.cluster}-containerd", node.containerd_argv(), {})
        importing: list[subprocess.Popen[bytes]] = []
        for node in nodes:
            node.wait_for_containerd()
            importing.extend(subprocess.Popen(node.ctr("images", "import", archive),
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                             for archive in archives.values())
        for process in importing:
            _, err = process.communicate(timeout=600)
            if process.returncode != 0:
                raise RuntimeError(f"ctr images import failed: {err.decode()}")
        self.say(f"real nodes: images imported ({time.monotonic() - t0:.1f}s)")
        for node in nodes:
            # Every kubelet binds the same device-plugin socket whatever its root dir, clearing
            # the folder first: two starting at once race ("address already in use").
            before = _file_at(realnode.DEVICE_PLUGIN_SOCKET)
            self._spawn(f"{node.net.cluster}-kubelet", node.kubelet_argv(), {})
            _await_new_file(realnode.DEVICE_PLUGIN_SOCKET, before, timeout=30)
            self._spawn(f"{node.net.cluster}-kube-proxy", node.kube_proxy_argv(), {})
        for node in nodes:
            pods.wait_node_ready(self.client(node.net.cluster), node.net.node_name,
                                 timeout=timeout)
            self.say(f"{node.net.cluster}: real node {node.net.node_name} Ready "
                     f"({time.monotonic() - t0:.1f}s)")

    def _write_node_identities(self, node: RealNode) -> None:
        """The kubelet's and kube-proxy's kubeconfigs: their own identities
        (``node_identity``), never the admin's."""
        admin = node.net.from_node(self.kubeconfig(node.net.cluster).read_text())
        user, group = node_identity.kubelet_user(node.net.node_name)
        for path, (name, org) in ((node.kubeconfig, (user, group)),
                                  (node.proxy_kubeconfig, (node_identity.KUBE_PROXY, None))):
            cert, key = node_identity.client_certificate(node.pki.ca, node.pki.ca_key, name, org)
            path.write_text(node_identity.kubeconfig_as(admin, name, cert, key))
            os.chmod(path, 0o600)

    def deploy_pods(self, timeout: float = 300) -> None:
        """The hub Deployment and each member's agent DaemonSet from deploy/, as Pods."""
        kubectl = self.binaries()["kubectl"]
        pods.apply(kubectl, self.kubeconfig(HUB), pods.hub_manifests(self.hub_args))
        for name in self.members:
            hub_config = self.hub_config_for_pods(name)
            pods.apply(kubectl, self.kubeconfig(name),
                       pods.agent_manifests(name, hub_config, self.agent_args))
        self._save(pods=True)
        for cluster in self.clusters:
            pods.wait_running(self.client(cluster), pods.NAMESPACE, timeout=timeout)
            self.say(f"{cluster}: fleet Pods Running")
        identities.wait_ca_bundle(self.client(HUB))
        identities.wait_job_webhook(self.client(HUB))
        self.collect_pod_logs()

    # -- the hub and agents as Pods --------------------------------------------------------
    @property
    def runs_pods(self) -> bool:
        """Whether the hub and agents run as Pods (else as host processes)."""
        return bool(self._load().get("pods"))

    def collect_pod_logs(self) -> None:
        """Link the logs of the hub's and agents' containers into ``logs/`` (``hub-pod-*``,
        ``agent-<member>-pod-*``), where the 403 check and the test reports read them. Call it
        before deleting a Pod: a link made while its container runs keeps every line."""
        if not self._load().get("real"):
            return
        for cluster in self.clusters:
            node_dir = self.workdir / "nodes" / cluster
            if node_dir.exists():
                pods.link_logs(node_dir / "pod-logs", self.workdir / "logs",
                               "hub" if cluster == HUB else f"agent-{cluster}")

    def fleet_pods(self, cluster: str) -> list[dict[str, Any]]:
        """fleet's Pods on ``cluster``: the hub replicas, or the member's agent."""
        items, _ = self.client(cluster).list(r.PODS, pods.NAMESPACE)
        return items

    def hub_leader_pod(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while (leader := pods.leader_pod(self.client(HUB))) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no hub Pod holds the hub's Lease after {timeout:.0f}s")
            time.sleep(0.5)
        return leader

    def delete_hub_pod(self, name: str, *, grace: int | None = 0) -> None:
        """Delete a hub Pod (``grace=0``: at once, its container killed); the Deployment
        replaces it."""
        self.collect_pod_logs()
        self.client(HUB).delete(r.PODS, name, pods.NAMESPACE, grace_period_seconds=grace)
        self.say(f"hub Pod {name} deleted (grace {grace})")

    def kill_container(self, cluster: str, pod: str, sig: signal.Signals = signal.SIGKILL
                       ) -> None:
        """Signal the main process of a fleet Pod's container on ``cluster``'s real node."""
        self.collect_pod_logs()
        body = self.client(cluster).get(r.PODS, pod, pods.NAMESPACE)
        container = body["spec"]["containers"][0]["name"]
        container_id = pods.container_id(body, container)
        if self.backend == "kind":
            self.kind().kill_container(cluster, container_id, sig)
        else:
            self.real_node(cluster).kill_container(container_id, sig)
        self.say(f"{cluster}: sent {sig.name} to {pod}/{container}")

    def wait_hub_pods_ready(self, timeout: float = 180) -> None:
        pods.wait_running(self.client(HUB), pods.NAMESPACE, timeout=timeout)
        self.collect_pod_logs()

    def restart_hub(self) -> None:
        """Kill every hub replica at once and start the hub again: its Pods deleted with
        grace 0 (the Deployment makes new ones) or, with host processes, SIGKILL and a new
        process."""
        if not self.runs_pods:
            self.stop_process("hub", signal.SIGKILL)
            self.start_hub()
            return
        before = {p["metadata"]["name"] for p in self.fleet_pods(HUB)}
        for name in sorted(before):
            self.delete_hub_pod(name)
        deadline = time.monotonic() + 180
        while True:
            names = {p["metadata"]["name"] for p in self.fleet_pods(HUB)}
            waiting = pods.not_running(self.client(HUB), pods.NAMESPACE)
            if len(names) >= len(before) and not names & before and not waiting:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"new hub Pods not Ready after 180s: {waiting}")
            time.sleep(0.5)
        identities.wait_job_webhook(self.client(HUB))
        self.collect_pod_logs()
        self.say(f"hub restarted as Pods {sorted(names)}")

    def component_pids(self) -> dict[str, int]:
        """Every hub and agent process on this host by name: the host processes, and the
        main process of each fleet Pod's container (``hub-pod-<pod>``,
        ``agent-<member>-pod-<pod>``, as their logs are named)."""
        found = {name: pid for name, pid in self.processes().items()
                 if component_log(f"{name}.log")}  # not the nodes' containerd, kubelet...
        if not self.runs_pods:
            return found
        for cluster in self.clusters:
            tasks = (self.kind().task_pids(cluster) if self.backend == "kind"
                     else self.real_node(cluster).task_pids())
            prefix = "hub" if cluster == HUB else f"agent-{cluster}"
            for pod in self.fleet_pods(cluster):
                try:
                    container = pods.container_id(pod, pod["spec"]["containers"][0]["name"])
                except LookupError:
                    continue
                if container in tasks:
                    found[f"{prefix}-pod-{pod['metadata']['name']}"] = tasks[container]
        return found

    def metrics_url(self, component: str) -> str:
        """Where ``component`` (``hub``, ``agent-member1``) serves /metrics: a host process
        of that name on 127.0.0.1, else its Pod (the leading hub replica) by Pod IP, which the
        host routes to the node."""
        if component in self._load().get("metrics_ports", {}) and component in self.processes():
            return f"http://127.0.0.1:{self.metrics_port(component)}/metrics"
        if component == HUB:
            cluster, name = HUB, self.hub_leader_pod()
        else:
            cluster = component.removeprefix("agent-")
            name = self.fleet_pods(cluster)[0]["metadata"]["name"]
        pod = self.client(cluster).get(r.PODS, name, pods.NAMESPACE)
        port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]
                    if p["name"] == "metrics")
        return f"http://{pod['status']['podIP']}:{port}/metrics"

    # -- kind clusters -------------------------------------------------------------------
    def kind(self) -> kindfleet.Kind:
        return kindfleet.Kind(Path(self._load()["kind"]["directory"]), self.workdir)

    def up_kind(self, *, with_controllers: bool = True) -> None:
        """Every cluster a kind cluster (podman), the hub and agents as Pods on their nodes,
        a kwok controller per member for the GPU nodes."""
        started = time.monotonic()
        reason = kindfleet.unavailable_reason()
        if reason:
            raise RuntimeError(reason)
        self.stop_processes()
        binaries = self._binaries()
        self.say("kind, kubeadm and node binaries: building or reusing the cached ones")
        kind_dir, node_dir = kindfleet.build_kind(), kindfleet.build_node_binaries()
        self._save(clusters=self.clusters, binaries=str(binaries.directory),
                   kind={**self._load().get("kind", {}), "directory": str(kind_dir)})
        kind = self.kind()
        kind.ensure_host()
        node_image = kindfleet.node_image(binaries, node_dir, kind_dir, self.say)
        kind.ensure_image(node_image)
        fleet_images = [images.busybox_image(), images.fleet_image(self.say)]
        existing = set(kind.clusters())
        subnets = self.kind_pod_subnets()
        kept = [name for name in self.clusters
                if name in existing and kind.reusable(name, node_image.name)
                and kind.pod_subnet(name) == subnets[name]]
        for name in self.clusters:
            if name in existing and name not in kept:
                self.say(f"{name}: removing a kind cluster left from an earlier run")
                kind.delete(name)
        if kept:
            self.say(f"keeping the running kind clusters {', '.join(kept)}")
        new = [name for name in self.clusters if name not in kept]
        self.create_kind_clusters(kind, new, node_image.name, subnets, started)
        kind.route_pods(subnets)
        for name in self.clusters:
            self.kubeconfig(name).write_text(kind.kubeconfig(name))
        loaded = self._load()["kind"].get("loaded", {})
        for name in self.clusters:
            # The cache's file names hold a hash of each image's inputs: a kept cluster that
            # has this build of an image needs it no more.
            wanted = sorted(str(image.archive) for image in fleet_images)
            if name not in kept or loaded.get(name) != wanted:
                for image in fleet_images:
                    kind.load(name, image.archive)
                loaded[name] = wanted
                self._save(kind={**self._load()["kind"], "loaded": loaded})
            pods.wait_node_ready(self.client(name), kind.node(name), timeout=300)
            self.say(f"{name}: node Ready, images loaded ({time.monotonic() - started:.1f}s)")
        kwok_config = kindfleet.kwok_config(self.workdir / "kwok.yaml")
        for name in self.members:
            self._spawn(f"kwok-{name}", kindfleet.kwok_argv(
                binaries, self.kubeconfig(name), kind.gateway(), kwok_config), {})
        hub = self.client(HUB)
        onboarding.install_crds(hub, onboarding.crd_manifests())
        identities.install_hub(hub, self.kubeconfig(HUB), self.identity_kubeconfig(HUB))
        for name, shapes in self.members.items():
            self.join(name, shapes)
        if with_controllers:
            self.deploy_pods()
        self.say(f"fleet is up on kind in {time.monotonic() - started:.1f}s: "
                 f"hub + {len(self.members)} members; kubeconfigs in {self.workdir}")

    def create_kind_clusters(self, kind: kindfleet.Kind, names: Sequence[str], image: str,
                             subnets: dict[str, str], started: float) -> None:
        """Create ``names`` as kind clusters side by side, each with its pod subnet."""
        self.say(f"creating {len(names)} kind clusters in parallel (node image {image})")
        creating: dict[str, subprocess.Popen[bytes]] = {}
        for name in names:
            creating[name] = kind.start_create(
                name, kindfleet.cluster_config(image, member=name != HUB),
                self.workdir / "logs" / f"kind-{name}.log")
            if len(creating) == 1:  # the first makes kind's network; the others use it
                kind.await_network(creating[name])
        for name, process in creating.items():
            if process.wait(timeout=600) != 0:
                log = (self.workdir / "logs" / f"kind-{name}.log").read_text()
                raise RuntimeError(f"creating kind cluster {name} failed:\n{log[-3000:]}\n"
                                   f"(see: {kind.logs_hint(name)})")
            kind.set_pod_subnet(name, subnets[name])
            self.say(f"{name}: kind cluster created ({time.monotonic() - started:.1f}s)")

    def kind_pod_subnets(self) -> dict[str, str]:
        return {name: kindnode.node_pod_subnet(index) for index, name in enumerate(self.clusters)}

    def save_pod_logs(self) -> None:
        """The hub's and agents' Pod logs into ``logs/`` (hub.log, agent-<member>.log), where
        the e2e suite looks for refusals (403) as it does in host processes' logs."""
        kubectl = self.binaries()["kubectl"]
        targets = [(HUB, "deployment/fleet-hub", "hub")]
        targets += [(name, "daemonset/fleet-agent", f"agent-{name}") for name in self.members]
        for cluster, workload, log in targets:
            done = subprocess.run([kubectl, "--kubeconfig", str(self.kubeconfig(cluster)), "logs",
                                   "-n", pods.NAMESPACE, workload, "--all-containers"],
                                  capture_output=True, text=True, check=False, timeout=60)
            (self.workdir / "logs" / f"{log}.log").write_text(done.stdout + done.stderr)

    def hub_config_for_pods(self, member: str) -> str:
        """The agent's hub kubeconfig as its Pod reaches the hub's API server."""
        text = self.agent_kubeconfig(member).read_text()
        if self._load().get("kind"):
            return kindfleet.internal_kubeconfig(text, self.kind().node_ip(HUB))
        return self.network(HUB).from_node(text)

    def start_control_planes(self, binaries: Binaries) -> None:
        kwok = Kwokctl(binaries, self.workdir)
        existing = set(kwok.clusters())
        for name in self.clusters:
            if name in existing:
                self.say(f"{name}: removing a cluster left from an earlier run")
                kwok.delete(name)
        self.say(f"starting {len(self.clusters)} control planes in parallel: "
                 f"{', '.join(self.clusters)}")
        t0 = time.monotonic()
        ports = free_ports(len(PORT_OPTIONS) * len(self.clusters))
        creating = {
            name: kwok.start_create(
                name, member=name != HUB, log=self.workdir / "logs" / f"kwokctl-{name}.log",
                ports=ports[i * len(PORT_OPTIONS):(i + 1) * len(PORT_OPTIONS)],
                real=self._real_settings(name, kwok))
            for i, name in enumerate(self.clusters)
        }
        self._save(clusters=self.clusters, binaries=str(binaries.directory))
        for name, process in creating.items():
            if process.wait(timeout=360) != 0:
                log = (self.workdir / "logs" / f"kwokctl-{name}.log").read_text()
                raise RuntimeError(f"creating cluster {name} failed:\n{log[-3000:]}")
            self.kubeconfig(name).write_text(kwok.kubeconfig(name))
            if self._load().get("real"):
                self.network(name).expose_api_server(self.kubeconfig(name))
            self.say(f"{name}: API server ready ({time.monotonic() - t0:.1f}s)")

    def binaries(self) -> Binaries:
        return Binaries(Path(self._load()["binaries"]))

    def add_cluster(self, name: str, shapes: list[NodeShape]) -> None:
        """Start one more member control plane with its nodes, not joined (join it with
        ``kubectl fleet join``)."""
        kwok = Kwokctl(self.binaries(), self.workdir)
        process = kwok.start_create(name, member=True,
                                    log=self.workdir / "logs" / f"kwokctl-{name}.log",
                                    ports=free_ports(len(PORT_OPTIONS)))
        if process.wait(timeout=360) != 0:
            raise RuntimeError(f"creating cluster {name} failed")
        self.kubeconfig(name).write_text(kwok.kubeconfig(name))
        self.members[name] = shapes
        self._save(clusters=self.clusters)
        member = self.client(name)
        for node in node_manifests(name, shapes):
            member.apply(r.NODES, node, field_manager="fleet-localfleet")
        self.say(f"{name}: control plane and {sum(s.count for s in shapes)} nodes up")

    def join(self, name: str, shapes: list[NodeShape]) -> None:
        hub, member = self.client(HUB), self.client(name)
        for node in node_manifests(name, shapes):
            member.apply(r.NODES, node, field_manager="fleet-localfleet")
        token_config = onboarding.join(hub, member, name, hub_kubeconfig=self.kubeconfig(HUB))
        if self.install_shipped:
            identities.install_agent(member, name, self.kubeconfig(name),
                                     self.identity_kubeconfig(name))
        self.agent_kubeconfig(name).write_text(token_config)
        os.chmod(self.agent_kubeconfig(name), 0o600)
        gpus = sum(s.count * s.gpus for s in shapes)
        self.say(f"{name}: joined ({sum(s.count for s in shapes)} nodes, {gpus} GPUs)")

    def start_hub(self, name: str = "hub", env: Mapping[str, str] | None = None) -> None:
        """Start a hub replica as the fleet-hub ServiceAccount; the API server reaches its
        webhook through the fleet-hub Service (an EndpointSlice for this process). ``env``:
        more of its environment (a fault scenario's clock skew, say)."""
        address = identities.webhook_address()
        port = identities.free_port(address)
        process = self._spawn(name, [sys.executable, "-m", "fleet.hub", *self.hub_args],
                              {"FLEET_DASHBOARD_PORT": str(free_ports(1)[0]), **(env or {}),
                               "KUBECONFIG": str(self.identity_kubeconfig(HUB)),
                               "FLEET_WEBHOOK_ADDR": address, "FLEET_WEBHOOK_PORT": str(port)})
        identities.wait_serving(address, port, lambda: process.poll() is None)
        identities.add_webhook_endpoint(self.client(HUB), name, address, port)
        identities.wait_ca_bundle(self.client(HUB))
        identities.wait_job_webhook(self.client(HUB))

    def start_agent(self, name: str, instance: str = "") -> None:
        """Start ``name``'s agent as the member's fleet-agent ServiceAccount with its scoped
        hub identity; a second ``instance`` stands by for the member's lease."""
        if not self.identity_kubeconfig(name).exists():  # joined by `kubectl fleet join`
            identities.install_agent(self.client(name), name, self.kubeconfig(name),
                                     self.identity_kubeconfig(name))
        process_name = f"agent-{name}" + (f"-{instance}" if instance else "")
        self._save(recipes={**self._load().get("recipes", {}), process_name: [name, instance]})
        self._spawn(process_name,
                    [sys.executable, "-m", "member_agent", "--cluster", name, *self.agent_args],
                    {"KUBECONFIG": str(self.identity_kubeconfig(name)),
                     "FLEET_HUB_KUBECONFIG": str(self.agent_kubeconfig(name)),
                     "FLEET_KUBELET_PORT": str(free_ports(1)[0])})

    def stop_process(self, name: str, sig: int = signal.SIGTERM) -> None:
        pids = self._load().get("processes", {})
        pid = pids.pop(name, None)
        self._save(processes=pids)  # first: a stopped process is not one that exited
        if pid:
            _terminate(int(pid), sig)
        if name.startswith(HUB):  # short timeouts: the hub's API server may be frozen or gone
            identities.remove_webhook_endpoint(Kube(str(self.kubeconfig(HUB)), timeout=2), name)

    def stop_processes(self) -> None:
        """Stop every hub and agent process the state file names (an earlier ``up`` of this
        workdir may have left them running against control planes it is about to replace)."""
        for name, pid in self._load().get("processes", {}).items():
            if _is_fleet_process(int(pid), self.workdir):  # never one that reused a pid
                self.say(f"stopping {name} (pid {pid})")
                _terminate(int(pid), signal.SIGTERM)
        self._save(processes={})

    def restart_exited_agents(self) -> list[str]:
        """Start again every agent that exited by itself (not through :meth:`stop_process`),
        as the kubelet restarts a DaemonSet's container: an agent exits when it loses its
        member's lease, for instance while the member's API server is down."""
        state = self._load()
        restarted = []
        for name, (cluster, instance) in state.get("recipes", {}).items():
            pid = state.get("processes", {}).get(name)
            if pid is not None and not _is_fleet_process(int(pid), self.workdir):
                self.say(f"{name} exited; starting it again")
                self.start_agent(cluster, instance)
                restarted.append(name)
        return restarted

    def pid(self, process: str) -> int:
        return int(self._load()["processes"][process])

    def metrics_port(self, process: str) -> int:
        """Where ``process`` (``hub``, ``agent-member1``) serves /metrics on 127.0.0.1."""
        return int(self._load()["metrics_ports"][process])

    def processes(self) -> dict[str, int]:
        """The hub and agent processes started here, by name."""
        return {name: int(pid) for name, pid in self._load().get("processes", {}).items()}

    def kill_component(self, cluster: str, component: str = "kube-apiserver",
                       sig: int = signal.SIGKILL) -> None:
        """Signal one control-plane process of ``cluster``: kill a member's API server, or
        freeze (SIGSTOP) and thaw (SIGCONT) the hub's to cut everyone off from it."""
        if self.backend == "kind" and cluster in self.kind().clusters():
            pid = self.kind().component_pid(cluster, component)  # a static Pod's process
        else:
            kwok = Kwokctl(Binaries(Path(self._load()["binaries"])), self.workdir)
            pid = int(kwok.pid_file(cluster, component).read_text().strip())
        os.kill(pid, sig)
        self.say(f"{cluster}: sent {signal.Signals(sig).name} to {component} (pid {pid})")

    def down(self) -> None:
        self.collect_pod_logs()
        self.stop_processes()
        state = self._load()
        binaries = state.get("binaries")
        if binaries:
            kwok = Kwokctl(Binaries(Path(binaries)), self.workdir)
            for name in kwok.clusters():
                self.say(f"deleting cluster {name}")
                kwok.delete(name)
        if state.get("kind"):
            kind = self.kind()
            existing = set(kind.clusters())
            for name in state.get("clusters", []):
                if name in existing:
                    self.say(f"deleting kind cluster {name}")
                    kind.delete(name)
        if state.get("real"):
            for cluster in state.get("clusters", []):
                self.say(f"{cluster}: removing the real node's containers, mounts, cgroups "
                         "and network namespace")
                self.real_node(cluster).cleanup()
        self._state_file.unlink(missing_ok=True)

    # -- helpers ---------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str],
               env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / "logs" / f"{name}.log").open("ab")
        metrics_port = int(env.get("FLEET_METRICS_PORT") or free_ports(1)[0])
        env = {**env, "FLEET_METRICS_PORT": str(metrics_port)}
        pythonpath = os.pathsep.join([str(REPO), str(REPO / "member-agent"),
                                      os.environ.get("PYTHONPATH", "")])
        process = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env, "PYTHONPATH": pythonpath},
                                   start_new_session=True)
        processes = self._load().get("processes", {})
        processes[name] = process.pid
        ports = {**self._load().get("metrics_ports", {}), name: metrics_port}
        self._save(processes=processes, metrics_ports=ports)
        self.say(f"started {name} (pid {process.pid}, log {log.name})")
        return process

    def _load(self) -> dict[str, Any]:
        if self._state_file.exists():
            loaded: dict[str, Any] = json.loads(self._state_file.read_text())
            return loaded
        return {}

    def _save(self, **updates: Any) -> None:
        state = self._load()
        state.update(updates)
        # whole or not at all: a thread of the tests may read it meanwhile (pod logs)
        scratch = self._state_file.with_suffix(f".{os.getpid()}.{threading.get_ident()}")
        scratch.write_text(json.dumps(state, indent=2))
        scratch.replace(self._state_file)


def component_log(name: str) -> bool:
    """Whether the log file ``name`` is a hub's or an agent's (a host process or a Pod's
    container), not a real node's containerd, kubelet or kube-proxy."""
    return name.startswith(("hub", "agent")) and not name.endswith(
        ("-containerd.log", "-kubelet.log", "-kube-proxy.log"))


def _is_fleet_process(pid: int, workdir: Path) -> bool:
    """A hub or agent, or a real node's containerd, kubelet or kube-proxy of this fleet
    (their configuration lives in the workdir)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    ours = str(workdir).encode() + b"/"
    return any(arg in (b"fleet.hub", b"member_agent", kindfleet.KWOK_MARK.encode())
               or arg.startswith(ours) for arg in argv)


def wait_gone(pid: int, timeout: float = 10) -> bool:
    """Wait for process ``pid`` to end, reaping it if it is our child; False on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def _terminate(pid: int, sig: int, timeout: float = 10) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    if wait_gone(pid, timeout):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _file_at(path: Path) -> tuple[int, int] | None:
    """Which file sits at ``path`` (a number alone may be reused by the next file made)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_ctime_ns


def _await_new_file(path: Path, before: tuple[int, int] | None, timeout: float) -> None:
    """Until a starting process has bound ``path`` afresh (or ``timeout`` passes: a kubelet
    that never binds it is found out by its node never becoming Ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _file_at(path)
        if now is not None and now != before:
            return
        time.sleep(0.1)
