"""The hub's validating webhook: checks that span objects, which schema and CEL cannot make.

Each handler parses the object, builds the pure package's view, asks it for a verdict, and
turns errors into a rejection and warnings into ``kubectl`` warnings, each naming its field.

The jobs' review, one for every job a user creates, is answered here directly
(:func:`answer`), not through kopf's handler machinery: that machinery (a cause, a body
view, a diff, a thread for the handler and its progress state) cost several times the
check itself, some 9 % of the hub's CPU when jobs arrive at Kueue's benchmark rate. The
rarer reviews (quota trees, TrainJobs' runtimes) keep kopf's handlers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp.web
import kopf
from pydantic import ValidationError

from fleet.api.protocol import JOB_WEBHOOK, RUNTIME, RUNTIME_WEBHOOK
from fleet.api.quantity import QuantityError
from fleet.api.size import JOB_COPIES, refusal
from fleet.api.trainer import TrainJob
from fleet.clients import errors
from fleet.clients.kube import Kube
from fleet.clients.resources import TRAINJOBS
from fleet.hub import trainer_runtimes
from fleet.hub.cache import RUNTIMES, Cache
from fleet.hub.dispatch import ADMITTED_AT
from fleet.hub.quota_views import quota_node
from fleet.kinds import adapter_for, checks
from fleet.kinds.base import InvalidJob
from fleet.kinds.trainjob import TRAINJOB
from quota.tree import QuotaNode, leaves_by_namespace
from quota.validation import OtherTree, validate_tree

# The API server sends an object of up to its request limit (3 MiB) in a review, twice for an
# update (object and oldObject). aiohttp reads 1 MiB by default: a larger review would be a
# failed call, and the job it carries refused with no word of which field is too large.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
log = logging.getLogger(__name__)

# A check of an object (and its old version on an update): why it is refused, or None.
Check = Callable[[Mapping[str, Any], Mapping[str, Any] | None], str | None]
# The checks answered without kopf, by the webhook's path (its id).
DIRECT: dict[str, Check] = {}


class WebhookServer(kopf.WebhookServer):
    """kopf's webhook server, reading reviews up to :data:`MAX_REVIEW_BYTES`, answering the
    :data:`DIRECT` checks itself."""

    @staticmethod
    async def _serve(fn: kopf.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        request = request.clone(client_max_size=MAX_REVIEW_BYTES)
        check = DIRECT.get(request.match_info.get("id", ""))
        if check is None:
            return await kopf.WebhookServer._serve(fn, request)
        try:
            review = json.loads(await request.read())
        except ValueError as exc:
            raise aiohttp.web.HTTPBadRequest(reason=str(exc)) from None
        if not isinstance(review, dict):
            raise aiohttp.web.HTTPBadRequest(reason="not an AdmissionReview")
        return aiohttp.web.json_response(answer(review, check))


def answer(review: Mapping[str, Any], check: Check) -> dict[str, Any]:
    """The AdmissionReview answering ``review`` with ``check``'s verdict, as kopf words one:
    a refusal is code 422 with the check's message; a check that fails refuses with 500 (the
    webhook fails closed) and logs why."""
    request = review.get("request")
    request = request if isinstance(request, Mapping) else {}
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    try:
        refused, code = check(request.get("object") or {}, request.get("oldObject")), 422
    except Exception as exc:  # a defect of the check: the job waits for a fixed hub
        log.exception("webhook check of %s failed", (request.get("object") or {}).get("kind"))
        refused, code = f"{type(exc).__name__}: {exc}", 500
    if refused:
        response |= {"allowed": False, "status": {"message": refused, "code": code}}
    return {"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": review.get("kind", "AdmissionReview"), "response": response}


class Runtimes:
    """Where the webhook finds a new TrainJob's runtime: the hub's cache, else the API server
    once the hub serves the webhook. A runtime created a moment before its TrainJob (both in
    one ``kubectl apply``) may not have reached the hub's watch yet, and refusing the job for
    it would refuse a valid request."""

    def __init__(self, cache: Cache) -> None:
        self._cache = cache
        self._api: Kube | None = None

    def read_through(self, kube: Kube) -> None:
        self._api = kube

    def find(self, ref: trainer_runtimes.RuntimeRef) -> Mapping[str, Any] | None:
        found = self._cache.item(RUNTIMES, ref.key)
        if found is not None or self._api is None:
            return found
        try:
            return self._api.get_or_none(ref.resource, ref.name, ref.namespace or None)
        except errors.ApiError:
            return None  # (refused as missing: the user's retry finds it in the cache)


def register(cache: Cache, runtimes: Runtimes) -> None:
    @kopf.on.validate("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees",
                      operations=["CREATE", "UPDATE"], id="elasticquotatree")
    def check_tree(*, body: kopf.Body, warnings: list[str], **_: Any) -> None:
        _refuse_whole(body)
        meta = body.get("metadata", {})
        namespace, name = meta.get("namespace", ""), meta.get("name", "")
        try:
            root = quota_node(body.get("spec", {}).get("root", {}))
        except QuantityError as exc:
            raise kopf.AdmissionError(str(exc), code=422) from None
        except (ValidationError, KeyError) as exc:
            raise kopf.AdmissionError(f"spec.root: {exc}", code=422) from None
        others = [OtherTree(k[1], k[2], quota_node(tree["spec"]["root"]))
                  for k, tree in _trees(cache).items()]
        verdict = validate_tree(root, namespace=namespace, name=name, others=others)
        warnings.extend(verdict.warnings)
        errors = [*verdict.errors, *_orphaned(cache, root)]
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)

    def check_job(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        """Schemas bound each field fleet reads; only the whole (its size, its nesting) can
        bound an open pod template. The rest needs the old object or the other jobs."""
        if whole := refusal(body, why=JOB_COPIES):
            return whole
        if old is not None:
            return checks.managed_by_changed(old, body)
        return checks.name_taken(body, lambda api_version, kind, namespace, name:
                                 cache.snapshot_job((f"{api_version}/{kind}", namespace, name)))

    DIRECT[JOB_WEBHOOK] = check_job

    @kopf.on.mutate(TRAINJOBS.group, TRAINJOBS.version, TRAINJOBS.plural,
                    operations=["CREATE"], id=RUNTIME_WEBHOOK)
    def snapshot_runtime(*, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        """A new TrainJob gets its runtime's snapshot (fleet.kinds.trainer_runtime), once
        it resolves against it: a missing runtime or a patch that does not fit it is refused
        here, naming the field, as Trainer's own webhook refuses them."""
        try:  # runs before the schema's checks: say what they would say, naming the field
            TrainJob.model_validate(dict(body))
        except ValidationError as exc:
            raise kopf.AdmissionError(first_error(exc), code=422) from None
        meta = body.get("metadata") or {}
        try:
            snapshot = trainer_runtimes.snapshot(body, runtimes.find)
            TRAINJOB.demand("", {**body, "metadata": {**meta, "annotations": {
                **(meta.get("annotations") or {}), RUNTIME: snapshot}}})
        except (InvalidJob, trainer_runtimes.RuntimeMissing) as exc:
            raise kopf.AdmissionError(str(exc), code=422) from None
        patch.setdefault("metadata", {}).setdefault("annotations", {})[RUNTIME] = snapshot


def first_error(exc: ValidationError) -> str:
    """A model's first complaint as the API server words one: ``spec.field: message``."""
    error = exc.errors()[0]
    path = ".".join(str(part) for part in error["loc"])
    return f"{path}: {error['msg']}"


def _refuse_whole(body: kopf.Body, why: str = "") -> None:
    message = refusal(body, why=why)
    if message:
        raise kopf.AdmissionError(message, code=422)


def _orphaned(cache: Cache, root: QuotaNode) -> list[str]:
    """Refuse an edit that leaves admitted jobs without a leaf: their quota would vanish."""
    owned = set(leaves_by_namespace(root))
    stranded = sorted(
        f"{job['metadata']['namespace']}/{job['metadata']['name']}"
        for job in cache.snapshot().jobs.values()
        if ADMITTED_AT in (job["metadata"].get("annotations") or {})
        and job["metadata"]["namespace"] not in owned
        and not adapter_for(job["apiVersion"], job["kind"]).is_finished(job)
    )
    if not stranded:
        return []
    return [f"spec.root: no leaf would own the namespace of admitted job(s) "
            f"{', '.join(stranded[:5])}; finish or delete them first"]


def _trees(cache: Cache) -> Mapping[tuple[str, str, str], Mapping[str, Any]]:
    return cache.snapshot().quota_trees
