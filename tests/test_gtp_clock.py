"""The GTP engine's clock: the time controls parsed as GTP 2 and KGS define
them, each move's budget, and the engine's own count of its time."""

import math

import pytest

from zeroloop.apps.gtp_clock import (
    MIN_MOVES_LEFT,
    Clock,
    Reading,
    TimeControl,
    move_budget,
    moves_left,
    parse_time_settings,
)


def test_time_settings_read_as_the_spec_says():
    assert parse_time_settings(["300", "0", "0"], kgs=False) == TimeControl("absolute", 300)
    assert parse_time_settings(["0", "10", "0"], kgs=False).kind == "none"  # byo-yomi time, no stones
    assert parse_time_settings(["60", "30", "5"], kgs=False) == TimeControl("canadian", 60, 30, 5)
    assert parse_time_settings(["none"], kgs=True).kind == "none"
    assert parse_time_settings(["absolute", "90"], kgs=True) == TimeControl("absolute", 90)
    byoyomi = TimeControl("byoyomi", 60, 10, periods=3)
    assert parse_time_settings(["byoyomi", "60", "10", "3"], kgs=True) == byoyomi
    assert parse_time_settings(["canadian", "60", "30", "5"], kgs=True) == TimeControl("canadian", 60, 30, 5)
    for bad, kgs in ((["1", "2"], False), (["-1", "0", "0"], False), (["nan", "0", "0"], False),
                     (["fischer", "1", "2"], True), (["absolute"], True), ([], True)):
        with pytest.raises(ValueError):
            parse_time_settings(bad, kgs)


def test_a_budget_never_spends_the_time_kept_for_the_moves_that_may_follow():
    absolute = TimeControl("absolute", 10)
    assert move_budget(TimeControl(), Reading(0), 10, 50, 0.05) == math.inf
    first = move_budget(absolute, Reading(10), 30, 74, 0.05)
    assert 0 < first < (10 - 74 * 0.05) / 30
    assert move_budget(absolute, Reading(3), 30, 74, 0.05) == 0  # 74 cheapest moves need 3.7 s: play fast
    # spending every budget (plus each move's cost) over the cap's moves never runs the clock out
    left = 10.0
    for ply in range(0, 147, 2):
        left -= move_budget(absolute, Reading(left), moves_left(7, ply), (147 - ply + 1) // 2, 0.05) + 0.05
        assert left > 0
    canadian = TimeControl("canadian", 0, 30, 10)
    assert move_budget(canadian, Reading(30, 10), 20, 74, 0.05) == pytest.approx(0.7 * 3 - 0.05)
    assert move_budget(canadian, Reading(60, 0), 20, 74, 0.05) == pytest.approx(0.7 * (3 + 3) - 0.05)
    byoyomi = TimeControl("byoyomi", 0, 5, periods=3)
    assert move_budget(byoyomi, Reading(5, 3), 20, 74, 0.05) == pytest.approx(0.7 * 5 - 0.05)
    assert moves_left(9, 500) == MIN_MOVES_LEFT


def test_the_engine_counts_its_own_time_between_reports():
    clock = Clock.start(TimeControl("canadian", 10, 20, 2))
    clock.spend(True, 4)
    assert clock.left[True] == Reading(6, 0) and clock.left[False] == Reading(10, 0)
    clock.spend(True, 7)  # main time runs out: the second over it is the period's first stone
    assert clock.left[True] == Reading(19, 1)
    clock.spend(True, 5)  # the period's last stone: a fresh period
    assert clock.left[True] == Reading(20, 2)
    japanese = Clock.start(TimeControl("byoyomi", 0, 5, periods=3))
    japanese.spend(False, 4)
    assert japanese.left[False] == Reading(5, 3)
    japanese.spend(False, 6)  # an overrun costs a period
    assert japanese.left[False] == Reading(5, 2)
    absolute = Clock.start(TimeControl("absolute", 5))
    absolute.spend(True, 1.5)
    assert absolute.left[True] == Reading(3.5, 0)
