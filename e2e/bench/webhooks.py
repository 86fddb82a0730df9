"""Objects created while the hub is stopped, as the benches queue their backlog: the hub's
validating webhooks are taken out of the way (the API server would refuse what no hub can
validate) and the install's configuration put back before the hub starts."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fleet.clients import resources as r
from fleet.clients.kube import Kube
from fleet.deploy import WEBHOOK_CONFIGURATION, webhook_configuration

T = TypeVar("T")


def without_webhook(hub: Kube, setup: Callable[[], T]) -> T:
    hub.delete(r.VALIDATINGWEBHOOKCONFIGURATIONS, WEBHOOK_CONFIGURATION)
    try:
        return setup()
    finally:
        hub.apply(r.VALIDATINGWEBHOOKCONFIGURATIONS, webhook_configuration(),
                  field_manager="bench")
