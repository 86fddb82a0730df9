"""Job manifests for the e2e suite, built from the seeds' examples."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from e2e.localfleet.demo import EXAMPLES

Body = dict[str, Any]


def seed_pytorchjob(name: str, namespace: str = "default", *, run_for: str = "3s",
                    exit_code: int = 0, gpus: int | None = None, workers: int | None = None,
                    master: bool = True) -> Body:
    """Seed 002's PyTorchJob (1 master, 2 workers, 1 GPU each), renamed, with the kwok
    annotations that make its pods run for ``run_for`` and exit with ``exit_code``."""
    job: Body = copy.deepcopy(yaml.safe_load((EXAMPLES / "pytorchjob.yaml").read_text()))
    job["metadata"] = {"name": name, "namespace": namespace}
    specs = job["spec"]["pytorchReplicaSpecs"]
    if not master:
        del specs["Master"]
    if workers is not None:
        if workers == 0:
            del specs["Worker"]
        else:
            specs["Worker"]["replicas"] = workers
    for spec in specs.values():
        template = spec["template"]
        template.setdefault("metadata", {})["annotations"] = {
            "fleet.sh/sim-duration": run_for, "fleet.sh/sim-exit-code": str(exit_code)}
        if gpus is not None:
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return job


def state(job: Body) -> str:
    """STATE as kubectl prints it for a Kubeflow job: the last True condition."""
    conditions = [c["type"] for c in (job.get("status") or {}).get("conditions") or []
                  if c.get("status") == "True"]
    for terminal in ("Failed", "Succeeded"):
        if terminal in conditions:
            return terminal
    return conditions[-1] if conditions else ""
