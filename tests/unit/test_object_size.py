"""A job too large or too deeply nested to copy into Works: the message names the field that
makes it so, and a hub that reads one anyway (stored without its webhook) keeps it waiting as
invalid instead of dispatching it, however deep it is. A member job's status too deep or too
large to carry in a Work is reported in part."""

from __future__ import annotations

from e2e.bench.passes import run_passes, scale_hub
from e2e.chaos.fuzz import nested_value
from e2e.jobs import nested, padded, seed_pytorchjob
from fleet import nesting
from fleet.api import size
from fleet.api.limits import MAX_DEPTH, MAX_OBJECT_BYTES
from fleet.api.size import JOB_COPIES, refusal, too_deep, too_large
from fleet.clients import resources as r

ENV = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].env"
NESTED = "spec.pytorchReplicaSpecs.Worker.template.spec.nested"


def test_a_job_within_the_bound_passes() -> None:
    assert too_large(seed_pytorchjob("small")) == ""
    assert too_large(padded(seed_pytorchjob("near"), MAX_OBJECT_BYTES - 4096)) == ""


def test_the_message_names_the_deepest_field_holding_most_of_the_bytes() -> None:
    message = too_large(padded(seed_pytorchjob("big"), 2 * MAX_OBJECT_BYTES), why=JOB_COPIES)
    # two variables of half each: the list holding both is the field, not either variable
    assert message.startswith(f"{ENV}: 1.0 MiB of the object's 1.0 MiB as JSON; fleet "
                              "accepts at most 512 KiB (it copies a job into the Work")
    one = too_large(padded(seed_pytorchjob("one"), 2 * MAX_OBJECT_BYTES, parts=1))
    assert one.startswith(f"{ENV}[0].value: 1.0 MiB of")


def test_what_the_api_server_writes_is_not_counted() -> None:
    body = seed_pytorchjob("managed")
    body["metadata"]["managedFields"] = [{"manager": "x" * (2 * MAX_OBJECT_BYTES)}]
    assert too_large(body) == ""


def test_nesting_is_bounded_naming_the_path_however_deep() -> None:
    # the nested field is 6 levels down, and its innermost value 5 + levels
    assert too_deep(nested(seed_pytorchjob("at"), MAX_DEPTH - 5)) == ""
    message = too_deep(nested(seed_pytorchjob("past"), MAX_DEPTH - 4))
    assert message == (f"{NESTED}.a.a.a.a…: nested more than {MAX_DEPTH} levels deep; fleet "
                       f"accepts at most {MAX_DEPTH}")
    # as deep as an API server stores (Go's JSON limit), at Python's default recursion limit
    assert refusal(nested(seed_pytorchjob("deepest"), nesting.API_MAX_DEPTH - 10)) == message


def test_the_hub_keeps_a_stored_job_too_large_to_copy_waiting_as_invalid() -> None:
    scheduler, kube = scale_hub(members=2, nodes=4, jobs=0)
    body = padded(seed_pytorchjob("too-large", "tenant-a", gpus=1), 2 * MAX_OBJECT_BYTES)
    scheduler.cache.upsert("jobs", kube.put(r.PYTORCHJOBS, body))
    run_passes(scheduler, kube, 1)
    stored = kube.get(r.PYTORCHJOBS, "too-large", "tenant-a")
    queuing = [c for c in stored["status"]["conditions"] if c["type"] == "Queuing"]
    assert [c["reason"] for c in queuing] == ["Invalid"]
    assert queuing[0]["message"].startswith(f"{ENV}: 1.0 MiB of the object's")
    assert not kube.writes.get("works")


def test_the_hub_reads_a_job_as_deep_as_an_api_server_stores_and_keeps_it_invalid() -> None:
    nesting.allow_api_depth()  # as the hub's main does
    scheduler, kube = scale_hub(members=2, nodes=4, jobs=0)
    body = nested(seed_pytorchjob("too-deep", "tenant-a", gpus=1), nesting.API_MAX_DEPTH - 10)
    scheduler.cache.upsert("jobs", kube.put(r.PYTORCHJOBS, body))
    run_passes(scheduler, kube, 1)
    stored = kube.get(r.PYTORCHJOBS, "too-deep", "tenant-a")
    queuing = [c for c in stored["status"]["conditions"] if c["type"] == "Queuing"]
    assert [(c["reason"], c["message"]) for c in queuing] == [
        ("Invalid", f"{NESTED}.a.a.a.a…: nested more than {MAX_DEPTH} levels deep; fleet "
                    f"accepts at most {MAX_DEPTH}")]
    assert not kube.writes.get("works")


def test_a_member_jobs_status_too_deep_or_large_is_reported_in_part() -> None:
    """A Work carries its member job's status to the hub, where one too deep would break
    every list of Works: what is cut keeps the status's short fields and its conditions."""
    conditions = [{"type": "Running", "status": "True", "reason": "JobRunning"}]
    status = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z", "conditions": conditions,
              "tasks": [{"type": "worker", "replicas": []}]}
    assert size.reported_status(status) == (status, "")
    deep = {**status, "tasks": [nested_value(9_000, {})], "note": "x" * 5_000}
    kept, why = size.reported_status(deep)
    assert kept == {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                    "conditions": conditions}
    assert why.startswith("status.tasks[0].a.a.a"), why
    large = {**status, "conditions": [{"message": "x" * MAX_OBJECT_BYTES}]}
    kept, why = size.reported_status(large)
    assert kept == {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    assert why == ("status.conditions[0].message: 512 KiB of the object's 512 KiB as JSON; "
                   "fleet accepts at most 256 KiB (a Work carries it to the hub)")
