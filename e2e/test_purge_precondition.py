"""The agent's purge deletes a member job only at the version its last report told
(``member_agent.works.sync``): against a real API server, a deletion at an older version is
refused and leaves the object, one at the current version removes it. The precondition is
resource-agnostic; it is tried on a ConfigMap, which no fleet component watches."""

from __future__ import annotations

import pytest

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

NAMESPACE = "purge-precondition"


def test_a_deletion_at_the_version_told_waits_for_the_version_that_ended(hub: Kube) -> None:
    hub.apply(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": NAMESPACE}}, field_manager="test")
    told = hub.create(r.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "job", "namespace": NAMESPACE}, "data": {"state": "Running"}})
    ended = hub.patch(r.CONFIGMAPS, "job", {"data": {"state": "Succeeded"}}, NAMESPACE)
    uid = told["metadata"]["uid"]
    with pytest.raises(errors.Conflict):
        hub.delete(r.CONFIGMAPS, "job", NAMESPACE, uid=uid,
                   resource_version=told["metadata"]["resourceVersion"])
    assert hub.get(r.CONFIGMAPS, "job", NAMESPACE)["data"]["state"] == "Succeeded"
    assert hub.delete(r.CONFIGMAPS, "job", NAMESPACE, uid=uid,
                      resource_version=ended["metadata"]["resourceVersion"])
    with pytest.raises(errors.NotFound):
        hub.get(r.CONFIGMAPS, "job", NAMESPACE)
