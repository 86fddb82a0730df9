"""The CRDs fleet installs, generated from the API models.

``python -m fleet.api.crds`` writes ``crds/<plural>.<group>.yaml``; ``--check`` exits non-zero
when a file differs from what the models generate (CI runs it, so ``crds/`` is never stale).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from fleet.api import cluster, jobset, kubeflow, policy, quota, t9k, trainer
from fleet.api.protocol import GROUP
from fleet.api.schema import structural_schema


@dataclass(frozen=True)
class Column:
    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.priority:
            out["priority"] = self.priority
        if self.description:
            out["description"] = self.description
        return out


AGE = Column("Age", ".metadata.creationTimestamp", "date")
KUBEFLOW_STATE = Column("State", ".status.conditions[-1:].type", description="Latest condition")
T9K_STATE = Column("State", ".status.phase", description="Phase of the job")
PLACEMENT = Column(
    "Clusters", ".metadata.annotations.fleet\\.sh/clusters", priority=1,
    description="Member clusters the job is bound to (hub only)",
)


@dataclass(frozen=True)
class CRD:
    model: type[BaseModel]
    group: str
    version: str
    kind: str
    plural: str
    scope: str = "Namespaced"
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[Column, ...] = (AGE,)
    status: bool = True

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    def manifest(self) -> dict[str, Any]:
        version: dict[str, Any] = {
            "name": self.version,
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": structural_schema(self.model)},
            "additionalPrinterColumns": [c.to_wire() for c in self.columns],
        }
        if self.status:
            version["subresources"] = {"status": {}}
        names: dict[str, Any] = {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.kind.lower(),
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        if self.categories:
            names["categories"] = list(self.categories)
        metadata: dict[str, Any] = {"name": self.name}
        if self.group.endswith(".k8s.io"):
            # Groups under k8s.io are protected; Kube Queue's own CRDs declare themselves so.
            metadata["annotations"] = {
                "api-approved.kubernetes.io": "unapproved, kube-queue compatible API"}
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": metadata,
            "spec": {
                "group": self.group,
                "names": names,
                "scope": self.scope,
                "versions": [version],
            },
        }


KUBEFLOW = "kubeflow.org"
T9K = "batch.tensorstack.dev"
POLICY = "policy.one.alibabacloud.com"
FLEET = GROUP
JOB_COLUMNS_KUBEFLOW = (KUBEFLOW_STATE, AGE, PLACEMENT)
JOB_COLUMNS_T9K = (T9K_STATE, AGE, PLACEMENT)

def kubeflow_job(model: type[BaseModel]) -> CRD:
    """A Kubeflow v1 job kind: its plural is its kind in lower case with an s."""
    kind = str(model.model_fields["kind"].default)
    return CRD(model, KUBEFLOW, "v1", kind, f"{kind.lower()}s",
               categories=("kubeflow", "fleet-jobs"), columns=JOB_COLUMNS_KUBEFLOW)


ALL: tuple[CRD, ...] = (
    *(kubeflow_job(model) for model in (kubeflow.PyTorchJob, kubeflow.TFJob, kubeflow.MPIJob,
                                        kubeflow.JAXJob, kubeflow.PaddleJob,
                                        kubeflow.XGBoostJob)),
    CRD(t9k.MPIJob, T9K, "v1beta1", "MPIJob", "mpijobs", short_names=("mj",),
        categories=("t9k", "fleet-jobs"), columns=JOB_COLUMNS_T9K),
    CRD(t9k.TensorFlowTrainingJob, T9K, "v1beta1", "TensorFlowTrainingJob",
        "tensorflowtrainingjobs", short_names=("tfj",),
        categories=("t9k", "fleet-jobs"), columns=JOB_COLUMNS_T9K),
    CRD(jobset.JobSet, "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets",
        categories=("fleet-jobs",), columns=(
            Column("TerminalState", ".status.terminalState",
                   description="Completed or Failed, once the JobSet has finished"),
            Column("Restarts", ".status.restarts", "integer"),
            Column("Completed", '.status.conditions[?(@.type=="Completed")].status'),
            Column("Suspended", ".spec.suspend"),
            Column("Waiting", ".status.queue.reason", description="Why the hub holds it"),
            AGE, PLACEMENT)),
    CRD(trainer.TrainJob, trainer.TRAINER_GROUP, "v1alpha1", "TrainJob", "trainjobs",
        categories=("fleet-jobs",), columns=(
            Column("State", ".status.conditions[-1:].type"),
            Column("Waiting", ".status.queue.reason", description="Why the hub holds it"),
            AGE, PLACEMENT)),
    CRD(trainer.TrainingRuntime, trainer.TRAINER_GROUP, "v1alpha1", "TrainingRuntime",
        "trainingruntimes", status=False),
    CRD(trainer.ClusterTrainingRuntime, trainer.TRAINER_GROUP, "v1alpha1",
        "ClusterTrainingRuntime", "clustertrainingruntimes", scope="Cluster", status=False),
    CRD(policy.PropagationPolicy, POLICY, "v1alpha1", "PropagationPolicy", "propagationpolicies",
        short_names=("pp",), status=False),
    CRD(policy.ClusterPropagationPolicy, POLICY, "v1alpha1", "ClusterPropagationPolicy",
        "clusterpropagationpolicies", scope="Cluster", short_names=("cpp",), status=False),
    CRD(quota.ElasticQuotaTree, "scheduling.sigs.k8s.io", "v1beta1", "ElasticQuotaTree",
        "elasticquotatrees", short_names=("eqt",)),
    CRD(quota.Queue, "scheduling.x-k8s.io", "v1alpha1", "Queue", "queues", columns=(
        Column("Usage", ".status.usage", description="used/max of each limited resource"),
        Column("Pending", ".status.pending", "integer"),
        Column("Admitted", ".status.admitted", "integer"),
        AGE,
    )),
    CRD(cluster.MemberCluster, FLEET, "v1alpha1", "MemberCluster", "memberclusters",
        scope="Cluster", short_names=("mc",), columns=(
            Column("Ready", '.status.conditions[?(@.type=="Ready")].status'),
            Column("Capacity-Stale", '.status.conditions[?(@.type=="CapacityStale")].status'),
            Column("Free-GPUs", ".status.freeGpus", "integer"),
            Column("Nodes", ".status.readyNodes", "integer"),
            Column("Heartbeat", ".status.lastHeartbeatTime", "date"),
            AGE,
        )),
    CRD(cluster.Work, FLEET, "v1alpha1", "Work", "works", columns=(
        Column("Cluster", ".spec.placement.cluster"),
        Column("Job", ".spec.job.name"),
        Column("Applied", ".status.applied", "boolean"),
        Column("State", ".status.state"),
        AGE,
    )),
)


class _Dumper(yaml.SafeDumper):
    """Writes a schema shared by several fields out in full at each: no YAML anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render(crd: CRD) -> str:
    header = "# Generated by `make crds` from the models in fleet/api. Do not edit.\n"
    return header + yaml.dump(crd.manifest(), Dumper=_Dumper, sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("crds"))
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args(argv)
    stale: list[str] = []
    expected = {f"{crd.name}.yaml": render(crd) for crd in ALL}
    for filename, text in expected.items():
        path = args.out / filename
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(filename)
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    present = {p.name for p in args.out.glob("*.yaml")} if args.out.exists() else set()
    extra = present - set(expected)
    if args.check and (stale or extra):
        print(f"crds/ is stale (run `make crds`): {', '.join(sorted([*stale, *extra]))}")
        return 1
    for name in extra:
        (args.out / name).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
