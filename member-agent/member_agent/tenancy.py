"""Keeping each tenant's pods on nodes of their own where they can be (HiveD's cells, node by
node).

The hub names, in each Work, whose the share's pods are (``spec.placement.tenant``: the quota
leaf that admitted the job, or ``opportunistic``). The agent labels every pod template of the
member job with it and gives each a preferred pod anti-affinity to the pods of every other
tenant, in any namespace, per node. The member's scheduler then puts a tenant's pods beside
its own, or on empty nodes, before it mixes them with another's: preempting opportunistic
jobs or reclaiming a borrower's frees whole nodes, and one tenant's 1-GPU jobs do not take a
GPU of every node that another tenant's 8-GPU gang needs whole. A preference, not a rule: a
full member still places every pod.

The Work also names the tenant's cells on the member (``spec.placement.cells``: the nodes its
guarantee owns, ``quota.cells``): the pods prefer those nodes above all (a preferred node
affinity by node name). A pod of another tenant that stands on them is a guest there, which
the owner takes back when its guarantee needs the node.

Pure: a manifest and the tenant in, a new manifest out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fleet.api.protocol import HOSTNAME_LEVEL, TENANT
from fleet.kinds import adapter_for

Body = dict[str, Any]
WEIGHT = 100  # the most a preferred term weighs: it outweighs the resource scores


def other_tenants(tenant: str) -> Body:
    """A preferred anti-affinity term: away from nodes with other tenants' pods."""
    return {"weight": WEIGHT, "podAffinityTerm": {
        "labelSelector": {"matchExpressions": [
            {"key": TENANT, "operator": "Exists"},
            {"key": TENANT, "operator": "NotIn", "values": [tenant]}]},
        "namespaceSelector": {},  # every namespace: tenants are quota leaves, not namespaces
        "topologyKey": HOSTNAME_LEVEL}}


def own_cells(cells: Sequence[str]) -> list[Body]:
    """Preferred node affinity terms onto the tenant's cells: one per node, since a node
    field selector takes one value (every node weighs the same: a node matches one term)."""
    return [{"weight": WEIGHT, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [cell]}]}} for cell in cells]


def keep_apart(template: Body, tenant: str, cells: Sequence[str] = ()) -> None:
    """Label a pod template (or a pod) with its tenant, keep it from other tenants' pods,
    and have it prefer its tenant's ``cells``."""
    template.setdefault("metadata", {}).setdefault("labels", {})[TENANT] = tenant
    affinity = template.setdefault("spec", {}).setdefault("affinity", {})
    _prefer(affinity.setdefault("podAntiAffinity", {}), other_tenants(tenant))
    for term in own_cells(cells):
        _prefer(affinity.setdefault("nodeAffinity", {}), term)


def _prefer(affinity: Body, term: Body) -> None:
    preferred = affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    if term not in preferred:
        preferred.append(term)


def templates_of(body: Body) -> Iterator[tuple[str, Body]]:
    """Each role's pod template of a member job, to change in place."""
    for role, spec in adapter_for(body["apiVersion"], body["kind"]).replica_specs(body):
        template = spec.get("template")
        if isinstance(template, dict):
            yield role, template


def kept_apart(manifest: Mapping[str, Any], tenant: str, cells: Sequence[str] = ()) -> Body:
    """A copy of the member job whose pod templates carry the tenant's label, keep away
    from other tenants' pods and prefer the tenant's cells (the manifest itself, copied,
    without a tenant)."""
    body = copy.deepcopy(dict(manifest))
    for _, template in templates_of(body) if tenant else ():
        keep_apart(template, tenant, cells)
    return body
