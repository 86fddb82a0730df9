"""Faults on a local fleet: signals to fleet's processes and to control-plane components, a
restart of a killed component with its own command line, and which replica leads."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.localfleet import HUB, LocalFleet, progress, wait_gone
from e2e.localfleet.kwok import Kwokctl
from fleet.clients import resources as r


def skewed_clock(offset_seconds: float) -> dict[str, str]:
    """The environment that runs a fleet process with its wall clock ``offset_seconds`` off
    the host's (``fleet.clock`` reads it; every time the process stamps or compares with a
    peer's goes through there)."""
    return {"FLEET_CHAOS_CLOCK_OFFSET_SECONDS": str(offset_seconds)}


def signal_process(fleet: LocalFleet, name: str, sig: int) -> None:
    """Signal a hub or agent process started by the fleet (its whole process group)."""
    os.killpg(fleet.pid(name), sig)


def _kwok(fleet: LocalFleet) -> Kwokctl:
    return Kwokctl(fleet.binaries(), fleet.workdir)


def component_pid(fleet: LocalFleet, cluster: str, component: str) -> int:
    return int(_kwok(fleet).pid_file(cluster, component).read_text().strip())


@dataclass(frozen=True)
class Command:
    argv: list[bytes]
    cwd: str
    env: dict[bytes, bytes]


def _command(pid: int) -> Command:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    env = dict(line.split(b"=", 1) for line in
               Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in line)
    return Command(argv, os.readlink(f"/proc/{pid}/cwd"), env)


class Supervisor:
    """Restarts a control-plane process that died, as the kubelet restarts a static pod:
    kube-scheduler and kube-controller-manager exit when they lose their leader lease (for
    instance while their API server is frozen), and kwokctl does not start them again. So do
    fleet's agents (run here as host processes, not as the DaemonSet's Pods): they are
    started again too."""

    def __init__(self, fleet: LocalFleet, interval: float = 1.0) -> None:
        self.fleet = fleet
        self.interval = interval
        self.commands: dict[tuple[str, str], Command] = {}
        self.held: set[tuple[str, str]] = set()  # deliberately down
        self.restarts: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> Supervisor:
        for cluster in self.fleet.clusters:
            for pid_file in _kwok(self.fleet).pid_file(cluster, "x").parent.glob("*.pid"):
                try:
                    self.commands[(cluster, pid_file.stem)] = _command(
                        int(pid_file.read_text().strip()))
                except (OSError, ValueError):
                    continue
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for (cluster, component) in list(self.commands):
                with self._lock:
                    if (cluster, component) in self.held or self._stop.is_set():
                        continue
                    try:
                        pid = component_pid(self.fleet, cluster, component)
                    except (OSError, ValueError):
                        continue
                    if not alive(pid):
                        self.restart(cluster, component)
                        self.restarts.append((cluster, component))
            try:
                self.restarts.extend(("agent", name)
                                     for name in self.fleet.restart_exited_agents())
            except Exception as exc:  # a member's API server may be down: next round
                progress(f"supervisor: an agent could not be started again: {exc!r}")

    def restart(self, cluster: str, component: str) -> None:
        command = self.commands[(cluster, component)]
        log = self.fleet.workdir / "logs" / f"{cluster}-{component}-restarted.log"
        process = subprocess.Popen(command.argv, cwd=command.cwd, env=command.env,
                                   stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        _kwok(self.fleet).pid_file(cluster, component).write_text(str(process.pid))

    def kill_and_restart(self, cluster: str, component: str, down_for: float = 0.0) -> None:
        """SIGKILL one control-plane process, keep it down ``down_for`` seconds, start it
        again with the same command line (kwokctl has no per-component restart)."""
        key = (cluster, component)
        with self._lock:
            self.held.add(key)
        try:
            pid = component_pid(self.fleet, cluster, component)
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid)
            time.sleep(down_for)
            with self._lock:
                self.restart(cluster, component)
        finally:
            with self._lock:
                self.held.discard(key)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def hub_leader(fleet: LocalFleet, candidates: tuple[str, ...],
               since: dict[str, int] | None = None) -> str | None:
    """Which of the hub processes ``candidates`` holds the hub Lease (from their logs: the
    Lease names an identity, each hub logs the identity it takes leadership as). ``since``:
    where each log stood when its process started (an earlier process of the same name
    wrote the same log)."""
    lease = fleet.client(HUB).get_or_none(r.LEASES, "fleet-hub", "fleet-system")
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    if not holder:
        return None
    for name in candidates:
        log = log_of(fleet, name)
        if log.exists():
            with log.open("rb") as text:
                text.seek((since or {}).get(name, 0))
                if f"{holder} took leadership".encode() in text.read():
                    return name
    return None


def log_of(fleet: LocalFleet, process: str) -> Path:
    return fleet.workdir / "logs" / f"{process}.log"


def log_sizes(fleet: LocalFleet, processes: tuple[str, ...]) -> dict[str, int]:
    """Where each process's log stands now (before it is started again)."""
    return {name: log_of(fleet, name).stat().st_size if log_of(fleet, name).exists() else 0
            for name in processes}


def agent_leader(fleet: LocalFleet, cluster: str) -> str | None:
    """The agent process of ``cluster`` holding the member's Lease (identities end in pids)."""
    lease = fleet.client(cluster).get_or_none(r.LEASES, "fleet-agent", "fleet-system")
    holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
    for name, pid in fleet.processes().items():
        if name.startswith(f"agent-{cluster}") and holder.endswith(f"-{pid}"):
            return name
    return None
