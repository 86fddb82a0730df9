"""The simulated member clusters: each node's free capacity and GPU model, the member's own
scheduler (best fit, GPU models honoured) and the capacity report the hub reads: nodes
grouped by free capacity and model, each group naming its nodes, as an agent reports them
(a preemption plan points at the nodes its victims free).

A gang's pods go to their tenant's cells first, then to nodes nobody owns, then to other
tenants' cells (``cells``, dealt by ``quota.cells``: the agent gives its pods a preferred
node affinity to the cells its bind names), and among those keep away from nodes other
tenants' pods are on, where they can (the agent's preferred pod anti-affinity), and then fit
best.

With racks (``rack_size``), each member's nodes are dealt into racks of that many nodes and
blocks of ``RACKS_PER_BLOCK`` racks, labelled with Kueue's default topology levels and
reported with them, and the member's scheduler keeps a share within the domains the hub
chose for it (as the agent pins its pods there)."""

from __future__ import annotations

from collections.abc import Sequence

from fleet.api.protocol import DEFAULT_TOPOLOGY_LEVELS
from fleet.sim.trace import Gang, Node
from propagation.fit import Domain
from propagation.resources import Resources
from propagation.views import ClusterView, NodeGroup
from quota.cells import CellNode, Cells, node_key

GPU = "nvidia.com/gpu"
MODEL_LABEL = "nvidia.com/gpu.product"  # the GPU model label (NVIDIA GPU feature discovery)
BLOCK, RACK = DEFAULT_TOPOLOGY_LEVELS[:2]  # Kueue's default levels above the node
RACKS_PER_BLOCK = 4


def node_name(cluster: int, index: int) -> str:
    """A simulated node's name: sortable, so named groups list nodes in member order."""
    return f"c{cluster}-n{index:05d}"


def cluster_name(index: int) -> str:
    return f"c{index}"


class Members:
    """Nodes dealt round-robin into ``clusters`` members; ``views`` is each one's report."""

    def __init__(self, nodes: Sequence[Node], clusters: int, rack_size: int = 0) -> None:
        self.free: list[list[list[int]]] = [[] for _ in range(clusters)]  # cpu, memory, GPUs
        self.models: list[list[str]] = [[] for _ in range(clusters)]  # GPU model per node
        for i, node in enumerate(nodes):
            self.free[i % clusters].append([node.cpu, node.memory, node.gpus])
            self.models[i % clusters].append(node.model)
        self.total_gpus = sum(n.gpus for n in nodes)
        # per node, the replicas on it by tenant
        self.tenants: list[list[dict[str, int]]] = [[{} for _ in f] for f in self.free]
        self.rack_size = rack_size
        self.allocatable = [[list(f) for f in nodes] for nodes in self.free]  # as they start
        self.cells = Cells()  # whose cell each node is
        self.views = [self.view(i) for i in range(clusters)]

    def topology(self, n: int) -> Domain:
        """Node ``n``'s block and rack labels (none without racks)."""
        if not self.rack_size:
            return ()
        rack = n // self.rack_size
        return ((BLOCK, f"b{rack // RACKS_PER_BLOCK}"), (RACK, f"r{rack}"))

    def view(self, index: int) -> ClusterView:
        groups: dict[tuple[int, int, int, str, Domain], list[str]] = {}
        for n, (free, model) in enumerate(zip(self.free[index], self.models[index],
                                              strict=True)):
            groups.setdefault((free[0], free[1], free[2], model, self.topology(n)),
                              []).append(node_name(index, n))
        return ClusterView(cluster_name(index), True, node_groups=tuple(
            NodeGroup(len(nodes), Resources.of({"cpu": c, "memory": m, GPU: g}),
                      (*domain, (MODEL_LABEL, model)), tuple(nodes))
            for (c, m, g, model, domain), nodes in sorted(groups.items())),
            topology_levels=(BLOCK, RACK) if self.rack_size else ())

    def refresh(self) -> None:
        self.views = [self.view(i) for i in range(len(self.free))]

    def place(self, index: int, gang: Gang, count: int, domains: Sequence[Domain] = (),
              tenant: str = "") -> list[int]:
        """The member's scheduler: for up to ``count`` replicas, on nodes of a GPU model the
        gang accepts, within ``domains`` when given, the tenant's own cells first (``foreign``),
        then a node no other tenant's replicas are on before one they are (when ``tenant`` is
        given), then best fit (least GPUs left); the nodes taken."""
        placed = []
        models = self.models[index]
        allowed = [set(d) for d in domains]
        for _ in range(count):
            best, best_left = -1, None
            for n, free in enumerate(self.free[index]):
                if gang.models and models[n] not in gang.models:
                    continue
                if allowed and not any(set(self.topology(n)) >= d for d in allowed):
                    continue
                if free[0] >= gang.cpu and free[1] >= gang.memory and free[2] >= gang.gpus:
                    shared = bool(tenant) and any(
                        replicas and other and other != tenant  # "": unlabelled pods
                        for other, replicas in self.tenants[index][n].items())
                    left = (self.foreign(index, n, tenant), shared, free[2] - gang.gpus,
                            free[0] - gang.cpu)
                    if best_left is None or left < best_left:
                        best, best_left = n, left
            if best < 0:
                break
            free = self.free[index][best]
            free[0] -= gang.cpu
            free[1] -= gang.memory
            free[2] -= gang.gpus
            on = self.tenants[index][best]
            on[tenant] = on.get(tenant, 0) + 1
            placed.append(best)
        if placed:
            self.views[index] = self.view(index)
        return placed

    def cell_nodes(self) -> list[CellNode]:
        """Every node as cells are dealt: its GPUs, and its shape (model and allocatable
        amounts, as the hub reads them from an agent's report)."""
        return [CellNode(cluster_name(i), node_name(i, n), gpus, (
            self.models[i][n], ("cpu", cpu), ("memory", memory), (GPU, gpus)))
            for i, nodes in enumerate(self.allocatable)
            for n, (cpu, memory, gpus) in enumerate(nodes)]

    def foreign(self, index: int, n: int, tenant: str) -> int:
        """0 on the tenant's own cell, 1 on a node nobody owns, 2 on another tenant's cell
        (the agent's preferred node affinity to its tenant's cells)."""
        owner = self.cells.owners.get(node_key(cluster_name(index), node_name(index, n)))
        return 1 if owner is None else 0 if owner == tenant else 2

    def release(self, index: int, gang: Gang, placed: Sequence[int], tenant: str = "") -> None:
        for n in placed:
            free = self.free[index][n]
            free[0] += gang.cpu
            free[1] += gang.memory
            free[2] += gang.gpus
            self.tenants[index][n][tenant] -= 1
        self.views[index] = self.view(index)
