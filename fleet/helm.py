"""Installing fleet's charts (``deploy/helm``) with the ``helm`` command.

``kubectl fleet join --helm`` installs the agent through the fleet-agent chart instead of
applying the manifests itself, so a member's agent is a Helm release that ``helm upgrade`` and
``helm uninstall`` manage. Values go to helm in a file readable only by its owner: they hold the
agent's hub credentials, which must appear in no process list.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from fleet import deploy

CHARTS = Path(__file__).resolve().parent.parent / "deploy" / "helm"
AGENT_CHART = CHARTS / "fleet-agent"
HUB_CHART = CHARTS / "fleet-hub"
AGENT_RELEASE = "fleet-agent"
HUB_RELEASE = "fleet-hub"
TIMEOUT_SECONDS = 600


class HelmError(Exception):
    """helm is missing or failed; the message is one line for the user."""


def binary(explicit: str | None = None) -> str:
    """The helm to run: ``explicit``, else ``$FLEET_HELM``, else ``helm`` on the PATH."""
    name = explicit or os.environ.get("FLEET_HELM") or "helm"
    found = shutil.which(name)
    if not found:
        raise HelmError(f"helm not found ({name}): install helm 3.8 or later, or give its "
                        "path with --helm-binary")
    return found


def chart_path(explicit: str | None, default: Path) -> str:
    """A chart directory, archive or reference (``oci://...``) given by the user, else the
    chart in this source tree; an installed package without one must be told where it is."""
    if explicit:
        return explicit
    if not (default / "Chart.yaml").exists():
        raise HelmError(f"no {default.name} chart beside this installation: give one with "
                        "--helm-chart (a directory, .tgz or oci:// reference)")
    return str(default)


def upgrade_install(helm: str, kubeconfig: Path, release: str, chart: str,
                    values: dict[str, Any], *, wait: bool = False,
                    timeout: float = TIMEOUT_SECONDS) -> str:
    """``helm upgrade --install`` ``release`` into fleet-system (created when missing);
    return helm's output. Raises :class:`HelmError` with helm's own last error line."""
    with tempfile.TemporaryDirectory(prefix="fleet-helm-") as tmp:
        values_file = Path(tmp) / "values.yaml"
        values_file.touch(mode=0o600)
        values_file.write_text(yaml.safe_dump(values, sort_keys=False))
        argv = [helm, "upgrade", "--install", release, chart,
                "--namespace", deploy.NAMESPACE, "--create-namespace",
                "--kubeconfig", str(kubeconfig), "--values", str(values_file)]
        if wait:
            argv += ["--wait", "--timeout", f"{int(timeout)}s"]
        done = _run(argv, release, timeout)
    return done.stdout


def agent_values(cluster: str, hub_kubeconfig: str, image: str = deploy.IMAGE,
                 node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    """The fleet-agent chart's values for what ``join`` knows: the member's name, its hub
    credentials, the image and where the DaemonSet runs."""
    repository, _, tag = image.rpartition(":")
    if not repository or "/" in tag:  # no tag, or a registry port such as host:5000/fleet
        repository, tag = image, ""
    values: dict[str, Any] = {"cluster": cluster, "hub": {"kubeconfig": hub_kubeconfig},
                              "image": {"repository": repository, "tag": tag}}
    if node_selector:
        values["nodeSelector"] = node_selector
    return values


def uninstall(helm: str, kubeconfig: Path, release: str,
              timeout: float = TIMEOUT_SECONDS) -> None:
    """``helm uninstall`` ``release`` from fleet-system; a release that is gone already is
    not an error (unjoin may be run twice)."""
    _run([helm, "uninstall", release, "--namespace", deploy.NAMESPACE,
          "--kubeconfig", str(kubeconfig), "--ignore-not-found"], release, timeout)


def _run(argv: list[str], release: str, timeout: float) -> subprocess.CompletedProcess[str]:
    verb = " ".join(argv[1:3]) if argv[1] == "upgrade" else argv[1]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        raise HelmError(f"helm {verb} {release} did not finish in {int(timeout)}s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise HelmError(f"helm {verb} {release}: "
                        f"{lines[-1] if lines else f'exit code {done.returncode}'}")
    return done
