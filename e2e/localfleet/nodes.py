"""Fake GPU nodes for members: kwok keeps the capacity they are created with."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

GPU_MODEL_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class NodeShape:
    """``count`` nodes with ``gpus`` GPUs each; cpu in cores and memory in GiB per node."""

    count: int
    gpus: int
    cpu: int = 96
    memory_gi: int = 768
    model: str = "NVIDIA-A100-SXM4-80GB"

    @staticmethod
    def parse(text: str) -> NodeShape:
        """``4x8`` (4 nodes of 8 GPUs) with optional ``:cpu=64,mem=512,model=V100``."""
        match = re.fullmatch(r"(\d+)x(\d+)(?::(.*))?", text.strip())
        if not match:
            raise ValueError(f"node shape {text!r}: expected e.g. 4x8 or 2x4:model=V100")
        extra = dict(kv.split("=", 1) for kv in (match.group(3) or "").split(",") if kv)
        return NodeShape(
            count=int(match.group(1)), gpus=int(match.group(2)),
            cpu=int(extra.get("cpu", 96)), memory_gi=int(extra.get("mem", 768)),
            model=extra.get("model", "NVIDIA-A100-SXM4-80GB"),
        )


def node_manifests(cluster: str, shapes: list[NodeShape]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    index = 0
    for shape in shapes:
        for _ in range(shape.count):
            name = f"{cluster}-node-{index}"
            index += 1
            amounts = {"cpu": str(shape.cpu), "memory": f"{shape.memory_gi}Gi", "pods": "110",
                       "nvidia.com/gpu": str(shape.gpus)}
            nodes.append({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                    "labels": {
                        "type": "kwok",
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        GPU_MODEL_LABEL: shape.model,
                    },
                },
                "status": {"allocatable": amounts, "capacity": amounts},
            })
    return nodes
