"""JAXJob, PaddleJob and XGBoostJob on the member: the environment each framework reads, as
training-operator v1.9 writes it. Pods, Services, restarts, conditions and replica statuses
are the Kubeflow kinds' (``kubeflow``); success follows the operator too: a JAXJob when every
worker succeeded, a PaddleJob with its masters (else every worker), an XGBoostJob with its
master. Peers are named by ``peer_host``: the Service here, or across clusters the one the
peer's agent exports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fleet.kinds import kubeflow as kinds
from member_agent.controllers import core
from member_agent.controllers.kind import Body
from member_agent.controllers.kubeflow import KubeflowKind


def _var(name: str, value: object) -> Body:
    return {"name": name, "value": str(value)}


class JAXKind(KubeflowKind):
    """JAX's ``jax.distributed.initialize`` reads the coordinator (worker 0) and its place."""

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        return [_var("PYTHONUNBUFFERED", 1),
                _var("COORDINATOR_PORT", self.port_number(job, "Worker")),
                _var("COORDINATOR_ADDRESS", self.peer_host(job, "Worker", 0)),
                _var("NUM_PROCESSES", sum(world.values())),
                _var("PROCESS_ID", index)]


class MastersLead(KubeflowKind):
    """Every Master replica is labelled ``job-role: master``, and only those (the operator's
    rule for these two kinds: a collective PaddleJob has no master pod)."""

    def master_role(self, job: Mapping[str, Any], rtype: str, index: int) -> bool:
        return rtype == "Master"


class PaddleKind(MastersLead):
    """``paddle.distributed.launch`` meets at PADDLE_MASTER: master 0 in parameter-server
    mode, worker 0 in collective mode (no Master); that replica names itself by its pod IP."""

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        meeting = "Master" if "Master" in world else "Worker"
        number = self.port_number(job, meeting)
        env = [_var("PYTHONUNBUFFERED", 1), _var("PADDLE_JOB_ID", job["metadata"]["name"]),
               _var("PADDLE_NNODES", sum(world.values()))]
        if (rtype, index) == (meeting, 0):
            env += [{"name": "POD_IP_DUMMY",
                     "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    _var("PADDLE_MASTER", f"$(POD_IP_DUMMY):{number}")]
        else:
            env.append(_var("PADDLE_MASTER", f"{self.peer_host(job, meeting, 0)}:{number}"))
        if meeting == "Master":  # one server or one trainer per pod
            env.append(_var("PADDLE_SERVER_NUM" if rtype == "Master" else "PADDLE_TRAINER_NUM",
                            1))
        return env


class XGBoostKind(MastersLead):
    """XGBoost's rabit tracker runs on the master; workers rank after it. WORKER_ADDRS and
    WORKER_PORT are for LightGBM, as the operator sets them (the first world-1 workers)."""

    def env(self, job: Mapping[str, Any], rtype: str, index: int,
            world: Mapping[str, int]) -> list[Body]:
        total = sum(world.values())
        rank = index + world.get("Master", 0) if rtype == "Worker" else index
        env = [_var("MASTER_PORT", self.port_number(job, "Master")),
               _var("MASTER_ADDR", self.peer_host(job, "Master", 0)),
               _var("WORLD_SIZE", total), _var("RANK", rank), _var("PYTHONUNBUFFERED", 1)]
        if total > 1:
            workers = range(world.get("Worker", 0))  # the other world-1: Master is one
            env += [_var("WORKER_PORT", self.port_number(job, "Worker")),
                    _var("WORKER_ADDRS", ",".join(self.peer_host(job, "Worker", i)
                                                  for i in workers))]
        return env


JAX = JAXKind(kinds.JAX, "jax", "jaxjob-port", 6666, core.Restart.NEVER, "jaxjob-controller")
PADDLE = PaddleKind(kinds.PADDLE, "paddle", "master", 36543, core.Restart.ON_FAILURE,
                    "paddlejob-controller")
XGBOOST = XGBoostKind(kinds.XGBOOST, "xgboost", "xgboostjob-port", 9999, core.Restart.NEVER,
                      "xgboostjob-controller")
