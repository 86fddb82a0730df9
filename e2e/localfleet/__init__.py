"""The local fleet: a hub and N members, each a real kube-apiserver on 127.0.0.1.

``LocalFleet(workdir).up()`` builds or finds the control-plane binaries, starts the clusters in
parallel with kwokctl, gives members fake GPU nodes, installs the CRDs, joins every member, and
starts the hub controller and one agent per member as separate processes. Kubeconfigs land in
``<workdir>/<cluster>.kubeconfig``; logs in ``<workdir>/logs``; ``down()`` stops everything.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.localfleet.kwok import PORT_OPTIONS, Binaries, Kwokctl, free_ports
from e2e.localfleet.nodes import NodeShape, node_manifests
from fleet import onboarding
from fleet.clients import resources as r
from fleet.clients.kube import Kube

REPO = Path(__file__).resolve().parents[2]
HUB = "hub"
DEFAULT_SHAPE = NodeShape(count=4, gpus=8)


def progress(message: str) -> None:
    print(f"[fleet {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class LocalFleet:
    workdir: Path
    members: dict[str, list[NodeShape]] = field(
        default_factory=lambda: {"member1": [DEFAULT_SHAPE], "member2": [DEFAULT_SHAPE]})
    say: Callable[[str], None] = progress
    hub_args: Sequence[str] = ()
    agent_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.workdir = self.workdir.resolve()
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._state_file = self.workdir / "state.json"

    # -- paths and clients ---------------------------------------------------------------
    def kubeconfig(self, cluster: str) -> Path:
        return self.workdir / f"{cluster}.kubeconfig"

    def agent_kubeconfig(self, cluster: str) -> Path:
        return self.workdir / f"{cluster}.agent-hub.kubeconfig"

    def client(self, cluster: str) -> Kube:
        return Kube(str(self.kubeconfig(cluster)))

    @property
    def clusters(self) -> list[str]:
        return [HUB, *self.members]

    # -- lifecycle -----------------------------------------------------------------------
    def up(self, *, with_controllers: bool = True) -> None:
        started = time.monotonic()
        binaries = self._binaries()
        self.start_control_planes(binaries)
        hub = self.client(HUB)
        self.say("installing CRDs on the hub")
        onboarding.install_crds(hub, onboarding.crd_manifests())
        for name, shapes in self.members.items():
            self.join(name, shapes)
        if with_controllers:
            self.start_hub()
            for name in self.members:
                self.start_agent(name)
        self.say(f"fleet is up in {time.monotonic() - started:.1f}s: "
                 f"hub + {len(self.members)} members; kubeconfigs in {self.workdir}")

    def _binaries(self) -> Binaries:
        self.say("control-plane binaries: building or reusing the cached ones")
        return Binaries.build(REPO)

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
                ports=ports[i * len(PORT_OPTIONS):(i + 1) * len(PORT_OPTIONS)])
            for i, name in enumerate(self.clusters)
        }
        self._save(clusters=self.clusters, binaries=str(binaries.directory))
        for name, process in creating.items():
            if process.wait(timeout=360) != 0:
                log = (self.workdir / "logs" / f"kwokctl-{name}.log").read_text()
                raise RuntimeError(f"creating cluster {name} failed:\n{log[-3000:]}")
            self.kubeconfig(name).write_text(kwok.kubeconfig(name))
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
        self.agent_kubeconfig(name).write_text(token_config)
        os.chmod(self.agent_kubeconfig(name), 0o600)
        gpus = sum(s.count * s.gpus for s in shapes)
        self.say(f"{name}: joined ({sum(s.count for s in shapes)} nodes, {gpus} GPUs)")

    def start_hub(self, name: str = "hub") -> None:
        self._spawn(name, [sys.executable, "-m", "fleet.hub", *self.hub_args],
                    {"KUBECONFIG": str(self.kubeconfig(HUB)),
                     "FLEET_WEBHOOK_PORT": str(free_ports(1)[0])})

    def start_agent(self, name: str, instance: str = "") -> None:
        """Start ``name``'s agent; a second ``instance`` stands by for the member's lease."""
        self._spawn(f"agent-{name}" + (f"-{instance}" if instance else ""),
                    [sys.executable, "-m", "member_agent", "--cluster", name, *self.agent_args],
                    {"KUBECONFIG": str(self.kubeconfig(name)),
                     "FLEET_HUB_KUBECONFIG": str(self.agent_kubeconfig(name))})

    def stop_process(self, name: str, sig: int = signal.SIGTERM) -> None:
        pids = self._load().get("processes", {})
        pid = pids.pop(name, None)
        if pid:
            _terminate(int(pid), sig)
        self._save(processes=pids)

    def pid(self, process: str) -> int:
        return int(self._load()["processes"][process])

    def processes(self) -> dict[str, int]:
        """The hub and agent processes started here, by name."""
        return {name: int(pid) for name, pid in self._load().get("processes", {}).items()}

    def kill_component(self, cluster: str, component: str = "kube-apiserver",
                       sig: int = signal.SIGKILL) -> None:
        """Signal one control-plane process of ``cluster``: kill a member's API server, or
        freeze (SIGSTOP) and thaw (SIGCONT) the hub's to cut everyone off from it."""
        state = self._load()
        kwok = Kwokctl(Binaries(Path(state["binaries"])), self.workdir)
        pid = int(kwok.pid_file(cluster, component).read_text().strip())
        os.kill(pid, sig)
        self.say(f"{cluster}: sent {signal.Signals(sig).name} to {component} (pid {pid})")

    def down(self) -> None:
        state = self._load()
        for name, pid in state.get("processes", {}).items():
            self.say(f"stopping {name}")
            _terminate(int(pid), signal.SIGTERM)
        binaries = state.get("binaries")
        if binaries:
            kwok = Kwokctl(Binaries(Path(binaries)), self.workdir)
            for name in kwok.clusters():
                self.say(f"deleting cluster {name}")
                kwok.delete(name)
        self._state_file.unlink(missing_ok=True)

    # -- helpers ---------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = (self.workdir / "logs" / f"{name}.log").open("ab")
        pythonpath = os.pathsep.join([str(REPO), str(REPO / "member-agent"),
                                      os.environ.get("PYTHONPATH", "")])
        process = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env, "PYTHONPATH": pythonpath},
                                   start_new_session=True)
        processes = self._load().get("processes", {})
        processes[name] = process.pid
        self._save(processes=processes)
        self.say(f"started {name} (pid {process.pid}, log {log.name})")

    def _load(self) -> dict[str, Any]:
        if self._state_file.exists():
            loaded: dict[str, Any] = json.loads(self._state_file.read_text())
            return loaded
        return {}

    def _save(self, **updates: Any) -> None:
        state = self._load()
        state.update(updates)
        self._state_file.write_text(json.dumps(state, indent=2))


def _terminate(pid: int, sig: int, timeout: float = 10) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:  # reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
