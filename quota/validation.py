"""Checks of an ElasticQuotaTree that span nodes or objects (the schema checks each field).

Returns errors (the tree is rejected) and warnings (accepted, with a message), each naming the
field it is about, as ``kubectl apply`` shows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from quota.amounts import MAX_JOBS, total
from quota.tree import QuotaNode, field_path, walk

TREE_NAMESPACE = "kube-system"
MAX_QUOTA_NODES = 1_000  # as fleet.api.limits says (the pure package imports no fleet code)
EVERY_POD_ASKS = ("cpu", "memory")  # what nearly every pod requests


@dataclass(frozen=True)
class OtherTree:
    namespace: str
    name: str
    root: QuotaNode


@dataclass(frozen=True)
class Verdict:
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def effective_min(node: QuotaNode, is_root: bool) -> dict[str, int]:
    """The root's guarantee is the whole tree: its min is taken as its max (seed 002)."""
    return dict(node.max) if is_root else dict(node.min)


def _unguaranteed(node: QuotaNode) -> list[str]:
    """The resources a leaf that guarantees something leaves out of its min: those its max
    lists and those nearly every pod asks for."""
    if not node.is_leaf or not node.min:
        return []
    asked = {*node.max, *EVERY_POD_ASKS} - {MAX_JOBS}
    return sorted(asked - set(node.min))


def validate_tree(root: QuotaNode, *, namespace: str, name: str,
                  others: Sequence[OtherTree] = ()) -> Verdict:
    errors: list[str] = []
    warnings: list[str] = []
    if namespace != TREE_NAMESPACE:
        errors.append(f"metadata.namespace: an ElasticQuotaTree takes effect only in "
                      f"{TREE_NAMESPACE}, not {namespace!r}")
    for other in others:
        if (other.namespace, other.name) != (namespace, name):
            errors.append(f"metadata.name: only one ElasticQuotaTree is supported and "
                          f"{other.namespace}/{other.name} already exists")
    if dict(root.min) != dict(root.max):
        warnings.append("spec.root.min differs from spec.root.max: fleet treats the root's min "
                        "as equal to its max (the whole tree is guaranteed), so children's mins "
                        "are checked against spec.root.max")
    owners: dict[str, str] = {}
    nodes = list(walk(root))
    if len(nodes) > MAX_QUOTA_NODES:
        errors.append(f"spec.root: the tree has {len(nodes)} nodes, more than "
                      f"{MAX_QUOTA_NODES}")
        return Verdict(tuple(errors), tuple(warnings))
    for placed in nodes:
        node, where = placed.node, field_path(root, placed.path)
        for field, amounts in (("min", node.min), ("max", node.max)):
            for resource, amount in sorted(amounts.items()):
                if amount < 0:  # the schema says so too; a tree stored before it did not
                    errors.append(f"{where}.{field}[{resource}]: {amount} must not be "
                                  "negative")
        for resource, low in node.min.items():
            high = node.max.get(resource)
            if high is not None and high < low:
                errors.append(f"{where}.max[{resource}]: {high} is below min {low}")
        unguaranteed = _unguaranteed(node)
        if unguaranteed:
            warnings.append(f"{where}.min: guarantees {', '.join(sorted(node.min))} but not "
                            f"{', '.join(unguaranteed)}: a resource left out of min is "
                            "guaranteed 0, so whatever of it this leaf's jobs use is borrowed "
                            "and another leaf taking back its own guarantee may reclaim them; "
                            "list it in min to guarantee it")
        names = [c.name for c in node.children]
        for duplicate in sorted({n for n in names if names.count(n) > 1}):
            errors.append(f"{where}.children: name {duplicate!r} is used twice")
        if node.children:
            parent_min = effective_min(node, placed.path == (root.name,))
            children_min = total(c.min for c in node.children)
            for resource, amount in sorted(children_min.items()):
                if resource in parent_min and amount > parent_min[resource]:
                    errors.append(f"{where}.children[*].min[{resource}]: the children's mins "
                                  f"sum to {amount}, above this node's min "
                                  f"{parent_min[resource]}")
        for ns in node.namespaces if node.is_leaf else ():
            if ns in owners:
                errors.append(f"{where}.namespaces: {ns!r} is already in {owners[ns]}")
            owners.setdefault(ns, where)
    for other in others:
        if (other.namespace, other.name) == (namespace, name):
            continue
        for placed in walk(other.root):
            for ns in placed.node.namespaces:
                if ns in owners:
                    errors.append(f"{owners[ns]}.namespaces: {ns!r} already belongs to tree "
                                  f"{other.namespace}/{other.name}")
    return Verdict(tuple(errors), tuple(warnings))
