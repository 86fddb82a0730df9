"""Keeping a share's pods in the topology domains the hub chose for it.

The hub packs a gang that asks for a topology level (a rack, a block) within one domain of it
and names the domain in the share it puts in the Work (``spec.placement.domains``: each
domain as the node labels that identify it, top level first). The agent applies the member
copy with a required node affinity to those domains on every pod template, so the member's
scheduler places the pods there and nowhere else. A role whose pod template asks for a
topology of its own (Kueue's pod-set topology) has its own domains
(``spec.placement.roleDomains``), and only its template is pinned to them. A template's own
required node affinity is kept: its terms are ANDed with the domains (node selector terms are
ORed, so each of its terms is joined with each domain). ``placed`` gives the member job as
the agent applies it: pinned so, and kept apart from other tenants' pods.

Pure: a manifest and the domains in, a new manifest out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.api import protocol
from member_agent.tenancy import keep_apart, templates_of

Body = dict[str, Any]
Domain = Sequence[tuple[str, str]]


def domain_terms(domains: Sequence[Domain]) -> list[Body]:
    """One node selector term per domain: every label of the domain, operator In."""
    return [{"matchExpressions": [{"key": key, "operator": "In", "values": [value]}
                                  for key, value in domain]} for domain in domains if domain]


def _joined(existing: Sequence[Mapping[str, Any]], terms: Sequence[Body]) -> list[Body]:
    """``existing`` AND ``terms``, as node selector terms (each an OR branch)."""
    if not existing:
        return [copy.deepcopy(term) for term in terms]
    out = []
    for own in existing:
        for term in terms:
            joined = copy.deepcopy(dict(own))
            joined["matchExpressions"] = [*(own.get("matchExpressions") or []),
                                          *copy.deepcopy(term["matchExpressions"])]
            out.append(joined)
    return out


def _prefer_outside(template: Body, domains: Sequence[Domain]) -> None:
    """A preferred node affinity away from ``domains`` (by their lowest level's label: a
    preference, so an exact match is not needed)."""
    lowest: dict[str, set[str]] = {}
    for domain in domains:
        if domain:
            key, value = domain[-1]
            lowest.setdefault(key, set()).add(value)
    if not lowest:
        return
    affinity = template.setdefault("spec", {}).setdefault("affinity", {}).setdefault(
        "nodeAffinity", {})
    preferred = affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    preferred.append({"weight": 100, "preference": {"matchExpressions": [
        {"key": key, "operator": "NotIn", "values": sorted(values)}
        for key, values in sorted(lowest.items())]}})


def pinned(manifest: Mapping[str, Any], domains: Sequence[Domain],
           role_domains: Sequence[tuple[str, Sequence[Domain]]] = ()) -> Body:
    """A copy of the member job whose every pod template requires a node in one of
    ``domains``, or of its role's own ``role_domains`` (the manifest itself, copied, when
    there are none). A role with no domains beside roles with their own prefers nodes outside
    theirs, so that its pods, which the scheduler may place first, leave those domains'
    room to the roles that must have it."""
    body = copy.deepcopy(dict(manifest))
    if not domains and not role_domains:
        return body
    own = dict(role_domains)
    for name, template in templates_of(body):
        terms = domain_terms(own.get(name) or domains)
        if not terms:
            _prefer_outside(template, [d for found in own.values() for d in found])
            continue
        pod = template.setdefault("spec", {})
        affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        required["nodeSelectorTerms"] = _joined(required.get("nodeSelectorTerms") or [], terms)
    return body


def placed(work: Mapping[str, Any]) -> Body:
    """A copy of the Work's member job as its placement has its pods placed: in the topology
    domains the hub packed the share into, and on their tenant's cells and nodes where they
    can be (``member_agent.tenancy``)."""
    placement = work["spec"]["placement"]
    manifest = pinned(work["spec"]["manifests"][0], protocol.share_domains(placement),
                      protocol.share_role_domains(placement))
    tenant = str(placement.get("tenant") or "")
    cells = [str(c) for c in placement.get("cells") or ()]
    for _, template in templates_of(manifest) if tenant else ():
        keep_apart(template, tenant, cells)
    return manifest
