"""A waiting job's status is rewritten when its reason or queue changes, at the head of its
queue when its place or message changes in kind, and further back only when its position is
off by half or more."""

from __future__ import annotations

from fleet.hub.coalescing import EXACT_POSITIONS, needs_write


def shown(position: int = 0, reason: str = "QuotaExceeded",
          message: str = "quota root: nvidia.com/gpu used 10 + requested 2 > max 11",
          name: str = "root-a") -> dict[str, object]:
    out: dict[str, object] = {"reason": reason, "message": message}
    if position:
        out |= {"name": name, "position": position}
    return out


def test_nothing_new_is_not_written_and_a_first_status_is() -> None:
    assert not needs_write(shown(40), shown(40))
    assert needs_write({}, shown(40))
    assert needs_write(shown(), shown(40))  # it joined a queue


PAUSED = "borrowing beyond quota root/a's min is paused while x waits"


def test_a_new_reason_or_queue_is_written_wherever_the_job_stands() -> None:
    assert needs_write(shown(400), shown(400, reason="Unschedulable"))
    assert needs_write(shown(400), shown(400, name="root-b"))


def test_behind_the_head_a_new_kind_of_message_waits_for_the_next_position_write() -> None:
    assert not needs_write(shown(400), shown(400, message=PAUSED))
    assert not needs_write(shown(400), shown(399, message=PAUSED))
    assert needs_write(shown(400), shown(200, message=PAUSED))


def test_the_head_of_a_queue_is_shown_exactly_but_for_numbers() -> None:
    assert needs_write(shown(EXACT_POSITIONS + 1), shown(EXACT_POSITIONS))
    assert needs_write(shown(2), shown(1))
    assert needs_write(shown(1), shown(2))  # someone of a higher priority came
    assert needs_write(shown(1), shown(1, message=PAUSED))
    assert not needs_write(shown(1), shown(1, message="quota root: nvidia.com/gpu used 9 + "
                                                       "requested 2 > max 11"))


def test_further_back_a_position_is_rewritten_once_off_by_half() -> None:
    numbers_only = "quota root: nvidia.com/gpu used 3 + requested 2 > max 4"
    assert not needs_write(shown(400), shown(399, message=numbers_only))
    assert not needs_write(shown(400), shown(201))
    assert needs_write(shown(400), shown(200))
    assert needs_write(shown(10), shown(20))  # moved back: someone of a higher priority came
    steps, at = 0, 5000
    for position in range(5000, 0, -1):  # a job moving up one place at a time
        if needs_write(shown(at), shown(position)):
            steps, at = steps + 1, position
    assert steps <= 16


def test_a_job_in_no_queue_is_rewritten_only_when_its_message_changes_in_kind() -> None:
    assert not needs_write(shown(message="member1: short of nvidia.com/gpu 4 in total"),
                           shown(message="member1: short of nvidia.com/gpu 6 in total"))
    assert needs_write(shown(message="member1: short of nvidia.com/gpu 4 in total"),
                       shown(message="no eligible cluster"))


def test_amounts_in_their_units_are_numbers_too() -> None:
    at = {"reason": "Unschedulable", "name": "q", "position": 5}
    shown = {**at, "message": "quota root: cpu used 1500m + requested 2 > max 4"}
    assert not needs_write(shown, {**at, "message": "quota root: cpu used 3 + requested 2 > max 4"})
    assert not needs_write(shown, {**at, "message": "quota root: cpu used 1.5 + requested 2Gi > "
                                                    "max 4"})
