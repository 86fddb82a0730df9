"""Topology-aware packing: a gang within one domain of a topology level, or over the fewest.

A member reports its topology levels (node label keys, top level first, e.g. block, rack, and
``kubernetes.io/hostname`` for the node itself) and each of its node groups carries the values
of the levels above the node. The domains form a tree, kept as a networkx graph: the cluster
at the root, each level's domains below the domain of the level above, node groups at the
leaves; a domain holds the node groups below it. Nodes that lack a level's label belong to no
domain of that level (or below), as in Kueue's topology-aware scheduling.

- **Required**: every replica of the cluster's share lands in one domain of the level: the
  domain that holds them all with the least left of the scarcest resource (ties: the domain's
  labels); when none holds them all, the share does not fit (for a split, the fullest domain
  takes what it can).
- **Preferred**: one domain when one holds them all, as required; otherwise the fewest
  domains, each time the one that takes the most of the replicas left (for replicas that ask
  alike this is the fewest possible), within one domain of the level above when that takes
  no more of them.

The domain a share keeps to is returned with its packing, so the agent can pin the share's
pods there (node affinity) and the member's scheduler keeps them in it. A hostname domain is
one node, named: only nodes the report names can be chosen at that level.

Pure: frozen views in, a packing out; deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import networkx as nx

from propagation.fit import Domain, Packing, Replica, pack
from propagation.resources import Resources, scarcity_order
from propagation.spent import with_assumed
from propagation.views import HOSTNAME_LEVEL, ClusterView, NodeGroup, TopologyRequest

MAX_DOMAINS = 4096  # domains one decision looks at in one cluster (hostnames count one each)
Candidate = tuple[Domain, tuple[NodeGroup, ...]]
TreeNode = Domain | int  # a domain (its label path), or a node group's index


def domain_tree(cluster: ClusterView) -> nx.DiGraph[TreeNode]:
    """The cluster's topology: domains (label paths, top level first) under the root ``()``,
    each node group (by its index) under the deepest domain whose labels it carries."""
    memo = cluster.packings
    found = memo.get(("topology-tree",))
    if isinstance(found, nx.DiGraph):
        return found
    graph: nx.DiGraph[TreeNode] = nx.DiGraph()
    graph.add_node(())
    levels = [level for level in cluster.topology_levels if level != HOSTNAME_LEVEL]
    for index, group in enumerate(cluster.node_groups):
        labels = dict(group.labels)
        parent: Domain = ()
        for level in levels:
            if level not in labels:
                break
            path = (*parent, (level, labels[level]))
            graph.add_edge(parent, path)
            parent = path
        graph.add_edge(parent, index)
    memo[("topology-tree",)] = graph
    return graph


def candidates(cluster: ClusterView, level: str) -> list[Candidate]:
    """The domains of ``level`` in ``cluster`` with the node groups each holds, in label
    order (bounded by MAX_DOMAINS); [] when the cluster does not report the level."""
    if level not in cluster.topology_levels:
        return []
    memo = cluster.packings
    key = ("topology-domains", level)
    found = memo.get(key)
    if isinstance(found, list):
        return found
    graph = domain_tree(cluster)
    out: list[Candidate] = []
    if level == HOSTNAME_LEVEL:
        # One domain per named node, under the labels of the levels above it.
        for domain in sorted((n for n in graph if isinstance(n, tuple)), key=_order):
            for index in sorted(i for i in graph.successors(domain) if isinstance(i, int)):
                group = cluster.node_groups[index]
                for name in group.nodes[: group.count]:
                    out.append(((*domain, (HOSTNAME_LEVEL, name)),
                                (NodeGroup(1, group.free, group.labels, (name,)),)))
    else:
        depth = [lv for lv in cluster.topology_levels if lv != HOSTNAME_LEVEL].index(level) + 1
        for domain in sorted((n for n in graph if isinstance(n, tuple) and len(n) == depth),
                             key=_order):
            held = sorted(i for i in nx.descendants(graph, domain) if isinstance(i, int))
            out.append((domain, tuple(cluster.node_groups[i] for i in held)))
    out = out[:MAX_DOMAINS]
    memo[key] = out
    return out


def _order(domain: Domain) -> tuple[str, ...]:
    return tuple(value for _, value in domain)


def _free(groups: Sequence[NodeGroup]) -> Resources:
    return sum((g.free.scaled(g.count) for g in groups), Resources())


def _packed(replicas: Sequence[Replica], groups: Sequence[NodeGroup], free: Resources | None,
            memo: dict[tuple[Resources, tuple[tuple[str, str], ...]], Packing]) -> Packing:
    """``pack``, but a domain of one node (the hostname level) packs as every other node
    of its shape did: the same replicas fit, on this node instead."""
    if len(groups) != 1 or groups[0].count != 1 or len(groups[0].nodes) != 1:
        return pack(replicas, groups, free)
    node = groups[0]
    key = (node.free, node.labels)
    known = memo.get(key)
    if known is None:
        known = memo[key] = pack(replicas, groups, free)
    return Packing(tuple((replica, node.nodes[0]) for replica, _ in known.placed),
                   known.unplaced, known.leftover)


def place(cluster: ClusterView, replicas: Sequence[Replica],
          request: TopologyRequest) -> Packing:
    """``replicas`` packed into ``cluster`` node by node within the topology ``request``
    asks for; the packing names the domains its placed replicas keep to."""
    found = candidates(cluster, request.level)
    if not found:
        if request.required:  # no domain of the level: nothing can be placed here
            return Packing((), tuple(replicas), cluster.free)
        return pack(replicas, cluster.node_groups, cluster.free)
    total = sum((r.request for r in replicas), Resources())
    order = scarcity_order(total)
    best: tuple[tuple[int, ...], Packing] | None = None
    fullest: Packing | None = None
    memo: dict[tuple[Resources, tuple[tuple[str, str], ...]], Packing] = {}
    short: list[tuple[int, int, Candidate, Resources]] = []  # (-bound, order, domain, free)
    scarce = order[0] if order else ""
    smallest = min((r.request.get(scarce, 0) for r in replicas), default=0)
    for index, (domain, groups) in enumerate(found):
        free = _free(groups)
        if not total.fits_in(free):
            # Cannot hold them all: packed (below) only to find the fullest, for a required
            # topology, most promising first, as long as one may hold more than the fullest.
            bound = free.get(scarce, 0) // smallest if smallest > 0 else len(replicas)
            short.append((-bound, index, (domain, groups), free))
            continue
        packing = _packed(replicas, groups, free, memo)
        if not packing.unplaced:
            left = tuple(packing.leftover.get(name, 0) for name in order)
            if best is None or left < best[0]:
                best = (left, Packing(packing.placed, (), packing.leftover, (domain,)))
        elif packing.placed and (fullest is None or len(packing.placed) > len(fullest.placed)):
            fullest = Packing(packing.placed, packing.unplaced, packing.leftover, (domain,))
    if best is None and request.required:
        for negative, _, (domain, groups), free in sorted(short, key=lambda s: s[:2]):
            if fullest is not None and -negative <= len(fullest.placed):
                break
            packing = _packed(replicas, groups, free, memo)
            if packing.placed and (fullest is None or len(packing.placed) > len(fullest.placed)):
                fullest = Packing(packing.placed, packing.unplaced, packing.leftover, (domain,))
    if best is not None:
        return _in_cluster(cluster, best[1])
    if request.required:
        return _in_cluster(cluster, fullest) if fullest is not None else \
            Packing((), tuple(replicas), cluster.free)
    return _in_cluster(cluster, _fewest_nearby(replicas, found))


def place_roles(cluster: ClusterView, replicas: Sequence[Replica]) -> Packing:
    """Kueue's pod-set topology: the replicas of each role that asks for a topology of its
    own packed within its domain of its level (``place``), role after role in the order of
    ``replicas`` (largest first), each on what the roles before it left; then the roles
    that ask for none, anywhere on what is left. The packing names each role's domains."""
    by_role: dict[str, list[Replica]] = {}
    for replica in replicas:
        by_role.setdefault(replica.role, []).append(replica)
    view = cluster
    placed: list[tuple[Replica, str]] = []
    unplaced: list[Replica] = []
    role_domains: list[tuple[str, tuple[Domain, ...]]] = []
    free_roles: list[Replica] = []
    for role, own in by_role.items():
        request = own[0].topology
        if request is None:
            free_roles += own
            continue
        packing = place(view, own, request)
        placed += packing.placed
        unplaced += packing.unplaced
        if packing.domains:
            role_domains.append((role, packing.domains))
        view = with_assumed(view, [r.request for r, _ in packing.placed], packing.domains)
    if free_roles:
        rest = pack(free_roles, view.node_groups, view.free)
        placed += rest.placed
        unplaced += rest.unplaced
    used = sum((replica.request for replica, _ in placed), Resources())
    return Packing(tuple(placed), tuple(unplaced), cluster.free - used, (), tuple(role_domains))


def _fewest_nearby(replicas: Sequence[Replica], found: Sequence[Candidate]) -> Packing:
    """The fewest domains; among spreads of that many, one within a single domain of the
    level above (racks of one block) when there is one, as Kueue climbs the levels."""
    spread = _fewest(replicas, found)
    if spread.unplaced or len(spread.domains) < 2 or len(found[0][0]) < 2:
        return spread
    parents: dict[Domain, list[Candidate]] = {}
    for domain, groups in found:
        parents.setdefault(domain[:-1], []).append((domain, groups))
    if len(parents) < 2:
        return spread
    for _, children in sorted(parents.items(), key=lambda item: _order(item[0])):
        near = _fewest(replicas, children)
        if not near.unplaced and len(near.domains) == len(spread.domains):
            return near
    return spread


def _fewest(replicas: Sequence[Replica], found: Sequence[Candidate]) -> Packing:
    """Preferred, when no domain holds them all: as few domains as it takes, each time the
    domain that places the most of the replicas left (ties: label order), and last the
    domain that holds all the rest most tightly (as Kueue ends a spread), so that a spread
    does not break up an empty domain it needs only part of."""
    remaining = list(replicas)
    placed: list[tuple[Replica, str]] = []
    used: list[Domain] = []
    left = dict(found)
    order = scarcity_order(sum((r.request for r in replicas), Resources()))
    while remaining and left:
        chosen: tuple[Domain, Packing] | None = None
        tightest: tuple[tuple[int, ...], Domain, Packing] | None = None
        memo: dict[tuple[Resources, tuple[tuple[str, str], ...]], Packing] = {}
        for domain, groups in left.items():
            packing = _packed(remaining, groups, None, memo)
            if packing.placed and not packing.unplaced:
                rest = tuple(packing.leftover.get(name, 0) for name in order)
                if tightest is None or rest < tightest[0]:
                    tightest = (rest, domain, packing)
            if packing.placed and (chosen is None
                                   or len(packing.placed) > len(chosen[1].placed)):
                chosen = (domain, packing)
        if tightest is not None:
            chosen = (tightest[1], tightest[2])
        if chosen is None:
            break
        domain, packing = chosen
        placed += packing.placed
        remaining = list(packing.unplaced)
        used.append(domain)
        del left[domain]
    return Packing(tuple(placed), tuple(remaining), Resources(), tuple(used))


def _in_cluster(cluster: ClusterView, packing: Packing) -> Packing:
    """``packing`` with what it leaves free counted over the whole cluster."""
    used = sum((replica.request for replica, _ in packing.placed), Resources())
    return Packing(packing.placed, packing.unplaced, cluster.free - used, packing.domains)


def within(cluster: ClusterView, domains: Sequence[Domain]) -> ClusterView:
    """``cluster`` with only the nodes of ``domains`` (a share's, which the agent pins its
    pods to): where that share may grow. All of it when there are none."""
    if not domains:
        return cluster
    groups = []
    for group in cluster.node_groups:
        labels = set(group.labels)
        named: set[str] = set()
        whole = False
        for domain in domains:
            host = dict(domain).get(HOSTNAME_LEVEL)
            if not labels.issuperset(kv for kv in domain if kv[0] != HOSTNAME_LEVEL):
                continue
            if host is None:
                whole = True
                break
            named |= {host} & set(group.nodes[: group.count])
        if whole:
            groups.append(group)
        elif named:
            groups.append(NodeGroup(len(named), group.free, group.labels, tuple(sorted(named))))
    return replace(cluster, node_groups=tuple(groups))


def domain_text(domain: Domain) -> str:
    """A domain as people read it: its lowest level's label (``rack=r2``)."""
    if not domain:
        return "the cluster"
    key, value = domain[-1]
    return f"{key}={value}"
