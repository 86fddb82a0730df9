"""Hub job status from its Works: the leader's share tells the life, counts add up."""

from __future__ import annotations

from typing import Any

from fleet.kinds.status import leader_work, merge_kubeflow_status


def work(cluster: str, replicas: dict[str, int], offsets: dict[str, int],
         conditions: list[tuple[str, str]], counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"w-{cluster}"},
        "spec": {"placement": {"cluster": cluster, "replicas": replicas, "offsets": offsets}},
        "status": {"jobStatus": {
            "conditions": [{"type": t, "status": s} for t, s in conditions],
            "replicaStatuses": counts, "startTime": f"2026-01-01T00:00:0{len(cluster)}Z"}},
    }


def test_the_share_holding_the_master_decides_and_counts_add_up() -> None:
    lead = work("m1", {"Master": 1, "Worker": 1}, {"Master": 0, "Worker": 0},
                [("Created", "True"), ("Succeeded", "True")],
                {"Master": {"succeeded": 1}, "Worker": {"succeeded": 1}})
    other = work("m2", {"Worker": 2}, {"Worker": 1}, [("Created", "True"), ("Running", "True")],
                 {"Worker": {"active": 2}})
    assert leader_work([other, lead], ["Master"]) is lead
    status = merge_kubeflow_status({}, [other, lead], ["Master"], "now")
    assert [c["type"] for c in status["conditions"]] == ["Created", "Succeeded"]
    # Kubeflow's rule, kept on the hub: once the job succeeded, what still runs counts as done
    assert status["replicaStatuses"] == {"Master": {"succeeded": 1}, "Worker": {"succeeded": 3}}


def test_a_failure_anywhere_fails_the_hub_job() -> None:
    lead = work("m1", {"Master": 1}, {"Master": 0}, [("Running", "True")],
                {"Master": {"active": 1}})
    other = work("m2", {"Worker": 1}, {"Worker": 0}, [("Failed", "True")],
                 {"Worker": {"failed": 1}})
    status = merge_kubeflow_status({}, [lead, other], ["Master"], "now")
    failed = [c for c in status["conditions"] if c["type"] == "Failed"]
    assert failed
    assert failed[0]["message"].startswith("m2: ")
    assert not [c for c in status["conditions"] if c["type"] == "Running"]


def test_before_any_report_the_bound_condition_stays() -> None:
    current = {"conditions": [{"type": "Created", "status": "True"}], "clusters": ["m1"]}
    unreported = {"metadata": {"name": "w"}, "spec": {"placement": {"cluster": "m1"}}}
    status = merge_kubeflow_status(current, [unreported], ["Master"], "now")
    assert status == current
