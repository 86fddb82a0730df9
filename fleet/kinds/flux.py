"""Trainer v2.3.0's flux policy: a TrainJob's node pods become one Flux cluster.

What Trainer's Flux plugin (``pkg/runtime/framework/plugins/flux``) does, made by fleet:

- every pod of the ``node`` replicated job gets an init container, ``flux-installer``, from a
  Flux view image (``FLUX_VIEW_IMAGE``), that copies Flux into an ``emptyDir`` and writes the
  broker's configuration and host list;
- the trainer's ``node`` container mounts that Flux, the job's ConfigMap of scripts
  (``<job>-flux-entrypoint``, at ``/etc/flux-config``) and its CURVE certificate Secret
  (``<job>-flux-curve``, at ``/curve``), and its command becomes
  ``/bin/bash /etc/flux-config/entrypoint.sh "<the original command and args>"``;
- on the first node pod the entrypoint starts the lead broker and runs the command with
  ``flux run -N <nodes> -n <nodes × procs per node> [-g <GPUs>]``; on the others it starts a
  follower broker, again until it exits cleanly.

The view image, the network device the brokers bind and Fluxion's queue policy may be set by
the runtime's or the TrainJob's ``trainer.env`` (``FLUX_VIEW_IMAGE``, ``FLUX_NETWORK_DEVICE``,
``FLUX_QUEUE_POLICY``), the TrainJob's first. The resolver records what the scripts need in
the JobSet's ``fleet.sh/flux`` annotation; the member's agent writes the ConfigMap from it
(:func:`scripts`) and makes the certificate (a fresh key per job, not Trainer's key derived
from the job's UID, which anyone who can read the TrainJob knows).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fleet.api import protocol
from fleet.kinds.base import Body, InvalidJob

INSTALLER = "flux-installer"
VIEW_IMAGE = "ghcr.io/converged-computing/flux-view-ubuntu:tag-jammy"  # Trainer's default
SETTINGS = {"FLUX_VIEW_IMAGE": VIEW_IMAGE, "FLUX_NETWORK_DEVICE": "eth0",
            "FLUX_QUEUE_POLICY": "fcfs"}
ROOT = "/mnt/flux"  # where the installer puts Flux, in every node pod
CONFIG_DIR = "/etc/flux-config"
CURVE_DIR = "/curve"
CURVE_KEY = "curve.cert"
INSTALL_VOLUME, VIEW_VOLUME, CURVE_VOLUME, MEMORY_VOLUME = (
    "flux-install", "spack-install", "flux-curve", "shared-memory")
SOFTWARE = "/opt/software"
BROKER_PORT = 8050


def config_map(trainjob: str) -> str:
    return f"{trainjob}-flux-entrypoint"


def curve_secret(trainjob: str) -> str:
    return f"{trainjob}-flux-curve"


@dataclass(frozen=True)
class FluxPlan:
    """What the member needs to write a flux JobSet's scripts (the ``fleet.sh/flux``
    annotation)."""

    nodes: int
    procs_per_node: int
    gpus_per_node: int
    device: str
    queue_policy: str


def settings(runtime_env: Sequence[Mapping[str, Any]],
             trainer_env: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Trainer's broker settings: its defaults, then the runtime's ``node`` container's
    variables of the same names, then the TrainJob's."""
    out = dict(SETTINGS)
    for env in (runtime_env, trainer_env):
        for var in env:
            if var.get("name") in out and isinstance(var.get("value"), str):
                out[str(var["name"])] = var["value"]
    return out


def original_command(runtime_command: Sequence[str] | None,
                     trainer: Mapping[str, Any] | None) -> str:
    """The command the entrypoint hands to Flux: the TrainJob's command, else the runtime's,
    then the TrainJob's args (the runtime's args are dropped, as Trainer drops them), each
    quoted for the shell it is run by."""
    trainer = trainer or {}
    given = trainer.get("command")
    command: Sequence[str] = given if given is not None else runtime_command or []
    return shlex.join([*command, *(trainer.get("args") or [])])


def apply(rjobs: Sequence[Body], name: str, command: str, view_image: str) -> None:
    """Trainer's ``EnforceMLPolicy`` on the ``node`` replicated job: the installer, the
    volumes and mounts, the wrapped command."""
    for rjob in rjobs:
        if rjob.get("name") != "node":
            continue
        pod = rjob["template"]["spec"]["template"].setdefault("spec", {})
        if any(c.get("name") == INSTALLER for c in pod.get("initContainers") or []):
            raise InvalidJob(f"spec.trainer.initContainers: the init container {INSTALLER} "
                             "is the flux policy's own (the runtime's node job has one)")
        scripts_volume = config_map(name)
        pod["volumes"] = _by_name(pod.get("volumes") or [], [
            {"name": VIEW_VOLUME, "emptyDir": {}},
            {"name": INSTALL_VOLUME, "emptyDir": {}},
            {"name": scripts_volume, "configMap": {"name": scripts_volume,
                                                    "defaultMode": 0o755}},
            {"name": MEMORY_VOLUME, "emptyDir": {"medium": "Memory"}},
            {"name": CURVE_VOLUME, "secret": {"secretName": curve_secret(name),
                                              "defaultMode": 0o400}}])
        pod["initContainers"] = [*(pod.get("initContainers") or []), {
            "name": INSTALLER, "image": view_image,
            "command": ["/bin/bash", f"{CONFIG_DIR}/init.sh"],
            "volumeMounts": [{"name": INSTALL_VOLUME, "mountPath": ROOT},
                             {"name": scripts_volume, "mountPath": CONFIG_DIR,
                              "readOnly": True}]}]
        for container in pod.get("containers") or []:
            if container.get("name") != "node":
                continue
            container["command"] = ["/bin/bash", f"{CONFIG_DIR}/entrypoint.sh", command]
            container.pop("args", None)
            container["volumeMounts"] = _by_name(container.get("volumeMounts") or [], [
                {"name": INSTALL_VOLUME, "mountPath": ROOT},
                {"name": VIEW_VOLUME, "mountPath": SOFTWARE},
                {"name": scripts_volume, "mountPath": CONFIG_DIR, "readOnly": True},
                {"name": CURVE_VOLUME, "mountPath": CURVE_DIR, "readOnly": True},
                {"name": MEMORY_VOLUME, "mountPath": "/dev/shm", "readOnly": True}])
    if not any(r.get("name") == "node" for r in rjobs):
        raise InvalidJob("spec.runtimeRef: a flux runtime needs a replicated job named node")


def _by_name(items: Sequence[Body], added: Sequence[Body]) -> list[Body]:
    """``added`` replacing any item of the same name (Trainer's upsert)."""
    names = {item["name"] for item in added}
    return [*(item for item in items if item.get("name") not in names), *added]


def annotate(annotations: Body, plan: FluxPlan) -> None:
    annotations[protocol.FLUX] = json.dumps(asdict(plan), separators=(",", ":"))


def plan_of(jobset: Mapping[str, Any]) -> FluxPlan | None:
    text = ((jobset.get("metadata") or {}).get("annotations") or {}).get(protocol.FLUX)
    if not text:
        return None
    fields = json.loads(text)
    return FluxPlan(int(fields["nodes"]), int(fields["procs_per_node"]),
                    int(fields["gpus_per_node"]), str(fields["device"]),
                    str(fields["queue_policy"]))


def _span(count: int) -> str:
    """Flux's idset of ``count`` items from 0: ``0`` or ``0-<count-1>``."""
    return "0" if count == 1 else f"0-{count - 1}"


def scripts(jobset: Mapping[str, Any]) -> dict[str, str] | None:
    """The ConfigMap data of a flux JobSet (None for others): ``init.sh``, run by the
    installer, and ``entrypoint.sh``, run by the trainer's containers."""
    plan = plan_of(jobset)
    if plan is None:
        return None
    meta = jobset["metadata"]
    name, namespace = str(meta["name"]), str(meta["namespace"])
    hosts = f"{name}-node-0-[{_span(plan.nodes)}]"
    return {"init.sh": _init(hosts, _broker(name, namespace, hosts, plan)),
            "entrypoint.sh": _entrypoint(name, plan)}


def _broker(name: str, namespace: str, hosts: str, plan: FluxPlan) -> str:
    # The brokers reach each other by the JobSet's headless Service, named as the TrainJob.
    return "\n".join([
        "[access]", "allow-guest-user = true", "allow-root-owner = true", "",
        "[resource]", f'path = "{ROOT}/config/etc/flux/system/R"', "",
        "[bootstrap]", f'curve_cert = "{ROOT}/config/etc/curve/curve.cert"',
        f"default_port = {BROKER_PORT}",
        f'default_bind = "tcp://{plan.device}:%p"',
        f'default_connect = "tcp://%h.{name}.{namespace}.svc.cluster.local:%p"',
        f'hosts = [{{ host = "{hosts}" }}]', "",
        "[archive]", f'dbpath = "{ROOT}/config/var/lib/flux/job-archive.sqlite"',
        'period = "1m"', 'busytimeout = "50s"', "",
        "[sched-fluxion-qmanager]", f'queue-policy = "{plan.queue_policy}"', ""])


def _init(hosts: str, broker: str) -> str:
    return f"""#!/bin/bash
# Made by fleet for a TrainJob of a flux runtime: run in the Flux view image, it copies Flux
# to the pod's shared volume and writes the broker's configuration.
set -eu
config={ROOT}/config
mkdir -p "$config/etc/flux/system/cron.d" "$config/etc/flux/config" "$config/etc/curve" \\
  "$config/var/lib/flux" "$config/run/flux" {ROOT}/view
echo '{hosts}' > "$config/etc/flux/system/hostlist"
cat > "$config/etc/flux/config/broker.toml" <<'FLEET_BROKER'
{broker}FLEET_BROKER
# The image's view lives in /opt/views/._view/<hash>; it links into /opt/software.
view=$(ls -d /opt/views/._view/*/ | head -n 1)
cp -R "$view". {ROOT}/view/
cp -R {SOFTWARE} {ROOT}/
touch {ROOT}/flux-operator-done.txt
"""


def _entrypoint(name: str, plan: FluxPlan) -> str:
    resources = f"--cores={_span(plan.procs_per_node)}"
    flags = f"-N {plan.nodes} -n {plan.nodes * plan.procs_per_node}"
    if plan.gpus_per_node:
        resources += f" --gpu={_span(plan.gpus_per_node)}"
        flags += f" -g {plan.gpus_per_node}"
    return f"""#!/bin/bash
# Made by fleet for a TrainJob of a flux runtime: starts this pod's Flux broker; the first
# node's runs the job's command ("$1") over every node, the others follow until it ends.
config={ROOT}/config
view={ROOT}/view
export PATH="$PATH:$view/bin"
cp -R {ROOT}/software/. {SOFTWARE}/
python_lib=$(find "$view/lib" -maxdepth 1 -type d -name 'python3*' | head -n 1)
if [ -n "$python_lib" ]; then
  export PYTHONPATH="${{PYTHONPATH:-}}:$python_lib/site-packages"
fi
export FLUX_RC_EXTRA="$view/etc/flux/rc1.d"
export LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:-}}:$view/lib"
cp {CURVE_DIR}/{CURVE_KEY} "$config/etc/curve/curve.cert"
chmod go-r "$config/etc/curve/curve.cert"
flux R encode --hosts="$(cat "$config/etc/flux/system/hostlist")" {resources} \\
  > "$config/etc/flux/system/R"
mkdir -p "$config/var/lib/flux" /tmp/fluxout
options=(-Scron.directory="$config/etc/flux/system/cron.d" -Stbon.fanout=256
  -Srundir="$config/run/flux" -Sstatedir="$config/var/lib/flux"
  -Slocal-uri="local://$config/run/flux/local" -Slog-stderr-level=0
  -Slog-stderr-mode=local)
if [ "$(hostname)" = "{name}-node-0-0" ]; then
  if [ -z "${{1:-}}" ]; then
    exec flux broker --config-path "$config/etc/flux/config" "${{options[@]}}"
  fi
  exec flux start -o --config "$config/etc/flux/config" "${{options[@]}}" \\
    flux run {flags} bash -c "$1"
fi
until flux start -o --config "$config/etc/flux/config" "${{options[@]}}"; do
  echo "the Flux broker left before the lead's job ended; starting it again in 15 s"
  sleep 15
done
"""
