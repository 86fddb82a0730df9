"""Effective permissions, as the API server reports them, against the reviewed lists in
``deploy/permissions/``.

Each identity asks SelfSubjectRulesReview what it may do in a namespace. Rules are normalised to
``(group resource[/subresource] [resourceName], verb)`` pairs, so how RBAC objects group their
rules does not matter, only what they grant. A reviewed list names, per namespace, one line
per ``group resource [name]`` with its verbs; ``"*"`` is what holds in every namespace (checked in
namespaces with no Role of the identity's). ``authenticated.yaml`` is what the API server grants
every authenticated user; it is part of every identity's ``"*"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleet.clients import resources as r
from fleet.clients.kube import Kube

REVIEWED = Path(__file__).resolve().parent.parent / "deploy" / "permissions"
ANY = "*"
Grant = tuple[str, str]  # ("group resource [name]", verb)


def effective(kube: Kube, namespace: str) -> set[Grant]:
    """What the identity behind ``kube`` may do in ``namespace`` (resource rules)."""
    review = kube.create(r.SELFSUBJECTRULESREVIEWS, {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace}})
    status = review["status"]
    if status.get("incomplete"):
        raise AssertionError(f"rules review in {namespace} is incomplete: "
                             f"{status.get('evaluationError')}")
    grants: set[Grant] = set()
    for rule in status.get("resourceRules") or []:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule.get("resources") or []:
                for name in rule.get("resourceNames") or [""]:
                    key = " ".join(p for p in (group or "core", resource, name) if p)
                    grants.update((key, verb) for verb in rule.get("verbs") or [])
    return grants


def _parse(lines: Iterable[str], values: Mapping[str, str]) -> set[Grant]:
    grants: set[Grant] = set()
    for line in lines:
        *key, verbs = line.format(**values).split()
        grants.update((" ".join(key), verb) for verb in verbs.split(","))
    return grants


@dataclass(frozen=True)
class Reviewed:
    """One identity's reviewed list with its placeholders (``{cluster}``, ``{job}``) filled."""
    identity: str
    namespaces: Mapping[str, set[Grant]]

    @staticmethod
    def load(name: str, directory: Path = REVIEWED, **values: str) -> Reviewed:
        doc = yaml.safe_load((directory / f"{name}.yaml").read_text())
        everyone = yaml.safe_load((directory / "authenticated.yaml").read_text())["namespaces"]
        base = _parse([*doc["namespaces"].get(ANY, []), *everyone[ANY]], values)
        namespaces = {ANY: base}
        for namespace, lines in doc["namespaces"].items():
            if namespace != ANY:
                namespaces[namespace.format(**values)] = base | _parse(lines, values)
        return Reviewed(doc["identity"], namespaces)

    def expected(self, namespace: str) -> set[Grant]:
        return self.namespaces.get(namespace, self.namespaces[ANY])


def differences(kube: Kube, reviewed: Reviewed, others: Iterable[str] = ("default",)
                ) -> list[str]:
    """Every grant missing from or beyond the reviewed list, in each namespace it names and
    in ``others`` (namespaces where only its ``"*"`` part may hold)."""
    found = []
    for namespace in sorted({*reviewed.namespaces, *others} - {ANY}):
        actual, expected = effective(kube, namespace), reviewed.expected(namespace)
        found += [f"{reviewed.identity} in {namespace}: missing {key} {verb}"
                  for key, verb in sorted(expected - actual)]
        found += [f"{reviewed.identity} in {namespace}: extra {key} {verb}"
                  for key, verb in sorted(actual - expected)]
    return found


def listing(kube: Kube, namespaces: Iterable[str]) -> str:
    """What an identity may do, in the reviewed lists' format (to write or review one)."""
    out: dict[str, list[str]] = {}
    for namespace in namespaces:
        by_key: dict[str, set[str]] = {}
        for key, verb in effective(kube, namespace):
            by_key.setdefault(key, set()).add(verb)
        out[namespace] = sorted(f"{k} {','.join(sorted(v))}" for k, v in by_key.items())
    return yaml.safe_dump({"namespaces": out}, sort_keys=False, width=120)


def main(argv: list[str] | None = None) -> int:
    """``python -m e2e.permissions WORKDIR``: what each identity of a running local fleet may
    do, in the reviewed lists' format (review it before it replaces a list)."""
    import argparse

    from e2e.localfleet import HUB, LocalFleet

    parser = argparse.ArgumentParser(prog="python -m e2e.permissions", description=main.__doc__)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--member", default="member1")
    args = parser.parse_args(argv)
    fleet = LocalFleet(args.workdir)
    for title, kubeconfig, namespaces in (
            ("hub", fleet.identity_kubeconfig(HUB), ["default", "fleet-system", "kube-queue"]),
            ("agent-member", fleet.identity_kubeconfig(args.member), ["default", "fleet-system"]),
            ("agent-hub", fleet.agent_kubeconfig(args.member),
             ["default", f"fleet-member-{args.member}"])):
        print(f"# {title}\n{listing(Kube(str(kubeconfig)), namespaces)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
