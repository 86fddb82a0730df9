"""The shipped ``fleet-leader-term`` admission policy on the hub's real API server: it refuses
the hub's writes of another term, lets everyone else's through, and, with no Lease at all,
refuses nobody (the API server looks the Lease up before it asks whose write it is).

The policy is probed through a copy pointed at ConfigMaps of one namespace, with its own
Leases: the real one guards the hub's live writes and must not be disturbed. The copy keeps
the shipped ``paramKind``, ``matchConditions``, validations and binding; the hub's identity
is taken on by impersonation (``kubectl --as``).
"""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from e2e.conftest import eventually
from e2e.localfleet import HUB, LocalFleet
from fleet import deploy
from fleet.api import protocol
from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Body

pytestmark = pytest.mark.e2e
NAMESPACE = "term-probe"
PROBE = "fleet-leader-term-probe"
HUB_USER = f"system:serviceaccount:{deploy.NAMESPACE}:{deploy.HUB}"
TERM = protocol.TERM
LIVE, GONE = "live", "gone"  # the bindings' Leases: one there, one never made


def probe_policy() -> list[Body]:
    """The shipped policy and binding, renamed and aimed at this namespace's ConfigMaps; one
    binding per Lease, each for the ConfigMaps labelled with that Lease's name."""
    policy, binding = copy.deepcopy(deploy.leader_term_policy())
    policy["metadata"] = {"name": PROBE}
    policy["spec"]["matchConstraints"] = {
        "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"], "operations": ["CREATE", "UPDATE"]}],
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}
    bindings = []
    for lease in (LIVE, GONE):
        one = copy.deepcopy(binding)
        one["metadata"] = {"name": f"{PROBE}-{lease}"}
        one["spec"]["policyName"] = PROBE
        one["spec"]["paramRef"].update(name=f"{PROBE}-{lease}", namespace=NAMESPACE)
        one["spec"]["matchResources"] = {"objectSelector": {"matchLabels": {"lease": lease}}}
        bindings.append(one)
    return [policy, *bindings]


@pytest.fixture(scope="module")
def probe(fleet: LocalFleet) -> Iterator[str]:
    """The probe installed; yields the live Lease's term."""
    hub = fleet.client(HUB)
    if hub.get_or_none(r.NAMESPACES, NAMESPACE) is None:
        hub.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": NAMESPACE}})
    lease = hub.create(r.LEASES, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": f"{PROBE}-{LIVE}", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "probe", "leaseTransitions": 3}})
    objects = probe_policy()
    for body in objects:
        hub.apply(r.for_kind(body["apiVersion"], body["kind"]), body, field_manager="test")
    try:
        yield f"{lease['metadata']['uid']}:3"  # as fleet.clients.leases writes a term
    finally:
        for body in reversed(objects):
            hub.delete(r.for_kind(body["apiVersion"], body["kind"]), body["metadata"]["name"])
        hub.delete(r.NAMESPACES, NAMESPACE)


def write(fleet: LocalFleet, name: str, lease: str, term: str | None,
          as_hub: bool) -> subprocess.CompletedProcess[str]:
    """Create or update a ConfigMap (kubectl apply), as the hub's identity or the admin."""
    annotations = {TERM: term} if term else {}
    body = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"lease": lease},
                         "annotations": annotations},
            "data": {"at": str(time.monotonic())}}  # every write is an update
    who = ["--as", HUB_USER, "--as-group", "system:masters"] if as_hub else []
    return subprocess.run(
        [fleet.binaries()["kubectl"], "--kubeconfig", str(fleet.kubeconfig(HUB)), *who,
         "apply", "--server-side", "--field-manager", "test", "-f", "-"],
        input=json.dumps(body), capture_output=True, text=True, check=False, timeout=60)


def refused_for_term(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode != 0 and "written under hub leader term" in done.stderr


def test_the_hub_writes_only_under_the_leases_term(fleet: LocalFleet, probe: str) -> None:
    stale = eventually(lambda: refused_for_term(
        write(fleet, "stale", LIVE, "some-old-uid:2", as_hub=True)), timeout=30,
        what="the probe policy refusing a write of another term")
    assert stale
    unmarked = write(fleet, "unmarked", LIVE, None, as_hub=True)
    assert refused_for_term(unmarked), unmarked.stderr
    assert "term none" in unmarked.stderr
    current = write(fleet, "current", LIVE, probe, as_hub=True)
    assert current.returncode == 0, current.stderr
    user = write(fleet, "users", LIVE, None, as_hub=False)
    assert user.returncode == 0, user.stderr


def test_no_lease_refuses_nobody(fleet: LocalFleet, probe: str) -> None:
    """A missing Lease (fresh install, Lease deleted) must not stop the users' job updates or
    the agents' Work finalizers: ``parameterNotFoundAction: Deny`` would."""
    eventually(lambda: refused_for_term(write(fleet, "ready", LIVE, "x:0", as_hub=True)),
               timeout=30, what="the probe policy in force")
    hub = fleet.client(HUB)
    with pytest.raises(errors.NotFound):
        hub.get(r.LEASES, f"{PROBE}-{GONE}", NAMESPACE)
    for _ in range(5):  # several writes, in case the second binding lagged the first
        for as_hub in (False, True):
            done = write(fleet, f"gone-{int(as_hub)}", GONE, None, as_hub=as_hub)
            assert done.returncode == 0, done.stderr
        time.sleep(0.5)
