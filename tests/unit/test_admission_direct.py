"""The jobs' webhook answered without kopf's handler machinery (fleet.hub.admission)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import aiohttp.web
from aiohttp.test_utils import TestClient, TestServer

from fleet.hub import admission

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u-1", "operation": "CREATE",
                      "object": {"kind": "PyTorchJob", "metadata": {"name": "a"}}}}


def test_an_allowed_object_is_answered_for_its_request() -> None:
    answer = admission.answer(REVIEW, lambda body, old: None)
    assert answer == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": {"uid": "u-1", "allowed": True}}


def test_a_refusal_says_why_with_422_and_an_update_is_checked_against_its_old_object() -> None:
    seen: list[Any] = []

    def check(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        seen.append(old)
        return "spec.runPolicy.managedBy: may not change"

    update = {**REVIEW, "request": {**REVIEW["request"], "operation": "UPDATE",  # type: ignore[dict-item]
                                    "oldObject": {"kind": "PyTorchJob"}}}
    response = admission.answer(update, check)["response"]
    assert response["allowed"] is False
    assert response["status"] == {"message": "spec.runPolicy.managedBy: may not change",
                                  "code": 422}
    assert seen == [{"kind": "PyTorchJob"}]


def test_a_check_that_fails_refuses_with_500_and_the_error() -> None:
    def broken(body: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        raise KeyError("apiVersion")

    response = admission.answer(REVIEW, broken)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "KeyError" in response["status"]["message"]


def test_a_review_without_a_request_is_refused_not_crashed_on() -> None:
    response = admission.answer({"request": "nonsense"}, lambda body, old: body["kind"])
    assert response["response"]["allowed"] is False
    assert response["response"]["status"]["code"] == 500


def test_the_server_answers_a_direct_path_itself_and_hands_others_to_kopf() -> None:
    handed: list[str | None] = []

    async def kopf_fn(data: Any, *, webhook: str | None = None, **_: Any) -> Any:
        handed.append(webhook)
        return {"response": {"uid": data["request"]["uid"], "allowed": True}}

    async def serve(request: aiohttp.web.Request) -> aiohttp.web.Response:
        return await admission.WebhookServer._serve(kopf_fn, request)  # type: ignore[arg-type]

    async def run() -> tuple[Any, Any, int]:
        app = aiohttp.web.Application()
        app.add_routes([aiohttp.web.post("/{id:.*}", serve)])
        async with TestClient(TestServer(app)) as client:
            direct = await (await client.post("/direct-test", json=REVIEW)).json()
            other = await (await client.post("/elasticquotatree", json=REVIEW)).json()
            bad = (await client.post("/direct-test", data=b"{not json")).status
        return direct, other, bad

    admission.DIRECT["direct-test"] = lambda body, old: "too large"
    try:
        direct, other, bad = asyncio.run(run())
    finally:
        del admission.DIRECT["direct-test"]
    assert direct["response"] == {"uid": "u-1", "allowed": False,
                                  "status": {"message": "too large", "code": 422}}
    assert other["response"]["allowed"] is True
    assert handed == ["elasticquotatree"]
    assert bad == 400
