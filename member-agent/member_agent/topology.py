"""Keeping a share's pods in the topology domains the hub chose for it.

The hub packs a gang that asks for a topology level (a rack, a block) within one domain of it
and names the domain in the share it puts in the Work (``spec.placement.domains``: each
domain as the node labels that identify it, top level first). The agent applies the member
copy with a required node affinity to those domains on every pod template, so the member's
scheduler places the pods there and nowhere else. A template's own required node affinity is
kept: its terms are ANDed with the domains (node selector terms are ORed, so each of its
terms is joined with each domain).

Pure: a manifest and the domains in, a new manifest out.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from fleet.kinds import adapter_for

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


def pinned(manifest: Mapping[str, Any], domains: Sequence[Domain]) -> Body:
    """A copy of the member job whose every pod template requires a node in one of
    ``domains`` (the manifest itself, copied, when there are none)."""
    body = copy.deepcopy(dict(manifest))
    terms = domain_terms(domains)
    if not terms:
        return body
    adapter = adapter_for(body["apiVersion"], body["kind"])
    for _, spec in adapter.replica_specs(body):
        template = spec.get("template")
        if not isinstance(template, dict):
            continue
        pod = template.setdefault("spec", {})
        affinity = pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        required["nodeSelectorTerms"] = _joined(required.get("nodeSelectorTerms") or [], terms)
    return body
