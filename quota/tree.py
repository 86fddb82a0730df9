"""The ElasticQuotaTree as the quota engine sees it: frozen nodes with canonical amounts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from quota.amounts import Amounts


@dataclass(frozen=True)
class QuotaNode:
    name: str
    min: Amounts = field(default_factory=dict)
    max: Amounts = field(default_factory=dict)
    namespaces: tuple[str, ...] = ()
    children: tuple[QuotaNode, ...] = ()

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class PlacedNode:
    """A node with its path from the root (names) and its ancestors' paths."""

    node: QuotaNode
    path: tuple[str, ...]

    @property
    def key(self) -> str:
        return "/".join(self.path)

    @property
    def ancestors(self) -> tuple[tuple[str, ...], ...]:
        return tuple(self.path[:i] for i in range(len(self.path) - 1, 0, -1))


def walk(root: QuotaNode, path: tuple[str, ...] = ()) -> Iterator[PlacedNode]:
    here = (*path, root.name)
    yield PlacedNode(root, here)
    for child in root.children:
        yield from walk(child, here)


def leaves_by_namespace(root: QuotaNode) -> Mapping[str, PlacedNode]:
    out: dict[str, PlacedNode] = {}
    for placed in walk(root):
        if placed.node.is_leaf:
            for namespace in placed.node.namespaces:
                out.setdefault(namespace, placed)
    return out


def field_path(root: QuotaNode, path: tuple[str, ...]) -> str:
    """``spec.root.children[0].children[1]`` for the node at ``path``."""
    text, node = "spec.root", root
    for name in path[1:]:
        index = next(i for i, c in enumerate(node.children) if c.name == name)
        text += f".children[{index}]"
        node = node.children[index]
    return text
