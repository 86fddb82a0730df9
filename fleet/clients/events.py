"""Kubernetes Events about an object, recorded best-effort (an event never fails a caller)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fleet.clients import errors
from fleet.clients import resources as r
from fleet.clients.kube import Kube

log = logging.getLogger(__name__)


def record(kube: Kube, obj: Mapping[str, Any], reason: str, message: str, *,
           type: str = "Normal", component: str) -> None:
    meta = obj["metadata"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                           "name": meta["name"], "namespace": meta["namespace"],
                           "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message, "type": type,
        "source": {"component": component},
        "reportingComponent": component, "reportingInstance": component,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }
    try:
        kube.create(r.EVENTS, body)
    except errors.ApiError as exc:
        log.warning("event %s on %s/%s not recorded: %s", reason, meta["namespace"],
                    meta["name"], exc)
