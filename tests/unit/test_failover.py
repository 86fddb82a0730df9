from __future__ import annotations

from propagation.failover import ShareHealth, decide_failover


def test_no_failover_within_the_toleration() -> None:
    assert decide_failover([ShareHealth("m1", False, 4.0, "cluster lost", True)], 5) is None
    assert decide_failover([ShareHealth("m1", True)], 0) is None


def test_one_share_past_the_toleration_moves_the_whole_gang() -> None:
    decision = decide_failover([ShareHealth("m1", True),
                                ShareHealth("m2", False, 7.0, "cluster lost", True)], 5)
    assert decision is not None
    assert decision.reason == "m2: cluster lost for 7s (toleration 5s)"
    assert decision.lost_clusters == ("m2",)
