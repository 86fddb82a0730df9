"""The kinds ``kubectl fleet get`` knows, with kubectl's names for them."""

from __future__ import annotations

from fleet.cli.config import CliError
from fleet.clients import resources as r

JOBS: dict[str, r.Resource] = {
    "pytorchjob": r.PYTORCHJOBS, "pytorchjobs": r.PYTORCHJOBS, "ptj": r.PYTORCHJOBS,
    "pytorchjob.kubeflow.org": r.PYTORCHJOBS,
    "tfjob": r.TFJOBS, "tfjobs": r.TFJOBS, "tfjob.kubeflow.org": r.TFJOBS,
    "mpijob": r.KUBEFLOW_MPIJOBS, "mpijobs": r.KUBEFLOW_MPIJOBS,
    "mpijob.kubeflow.org": r.KUBEFLOW_MPIJOBS,
    "jaxjob": r.JAXJOBS, "jaxjobs": r.JAXJOBS, "jaxjob.kubeflow.org": r.JAXJOBS,
    "paddlejob": r.PADDLEJOBS, "paddlejobs": r.PADDLEJOBS,
    "paddlejob.kubeflow.org": r.PADDLEJOBS,
    "xgboostjob": r.XGBOOSTJOBS, "xgboostjobs": r.XGBOOSTJOBS,
    "xgboostjob.kubeflow.org": r.XGBOOSTJOBS,
    "mpijob.batch.tensorstack.dev": r.T9K_MPIJOBS, "mj": r.T9K_MPIJOBS,
    "tensorflowtrainingjob": r.TENSORFLOWTRAININGJOBS,
    "tensorflowtrainingjobs": r.TENSORFLOWTRAININGJOBS, "tfj": r.TENSORFLOWTRAININGJOBS,
    "tensorflowtrainingjob.batch.tensorstack.dev": r.TENSORFLOWTRAININGJOBS,
    "jobset": r.JOBSETS, "jobsets": r.JOBSETS, "js": r.JOBSETS,
    "jobset.jobset.x-k8s.io": r.JOBSETS,
    "trainjob": r.TRAINJOBS, "trainjobs": r.TRAINJOBS,
    "trainjob.trainer.kubeflow.org": r.TRAINJOBS,
}
PODS = ("pod", "pods", "po")
QUEUES = ("queue", "queues", "q", "queue.scheduling.x-k8s.io")
CLUSTERS = ("cluster", "clusters", "membercluster", "memberclusters", "mc",
            "membercluster.fleet.sh")
WORKS = ("work", "works", "work.fleet.sh")
ALL = (*JOBS, *PODS, *QUEUES, *CLUSTERS, *WORKS)
PRIMARY_JOBS = ("pytorchjob", "tfjob", "mpijob", "jaxjob", "paddlejob", "xgboostjob",
                "mpijob.batch.tensorstack.dev", "tensorflowtrainingjob", "jobset",
                "trainjob")
PRIMARY = (*PRIMARY_JOBS, "pod", "queue", "clusters", "work")


def job_resource(kind: str) -> r.Resource:
    try:
        return JOBS[kind.lower()]
    except KeyError:
        raise CliError(f"unknown job kind {kind!r}; one of {', '.join(PRIMARY_JOBS)} "
                       "(short names ptj, mj, tfj)") from None


def check(kind: str) -> str:
    lowered = kind.lower()
    if lowered not in ALL:
        raise CliError(f"the server doesn't have a resource type {kind!r} in kubectl fleet; "
                       f"one of {', '.join(PRIMARY)}")
    return lowered
