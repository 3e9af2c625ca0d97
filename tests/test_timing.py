"""The part timer (engine/timing.py) and its hooks in self-play, search and
the evaluators: a run with a timer plays the very games of a run without,
and charges every part."""

import time

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import (
    ConstantEvaluator,
    FixedBatchEvaluator,
    NetConfig,
    NetworkEvaluator,
    PolicyValueNet,
)
from zeroloop.engine.search import SearchConfig, SearchStats
from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games
from zeroloop.engine.timing import PARTS, PartTimer


def test_a_lap_charges_the_time_since_the_last_one():
    timer = PartTimer()
    timer.start()
    time.sleep(0.01)
    timer.lap("tree")
    timer.lap("rules")  # right after: next to nothing
    time.sleep(0.01)
    timer.start()  # not charged
    timer.lap("cache")
    assert timer.seconds["tree"] >= 0.01
    assert timer.seconds["rules"] < 0.005 and timer.seconds["cache"] < 0.005
    assert timer.total == pytest.approx(sum(timer.seconds.values()))
    with pytest.raises(KeyError):
        timer.lap("networks")
    timer.reset()
    assert timer.total == 0 and list(timer.seconds) == list(PARTS)


def test_the_constant_evaluator_answers_uniform_priors_and_value_zero():
    game = make_game("connect4")
    states = [game.initial_state(), game.play([3, 3, 2])]
    priors, values = ConstantEvaluator(game)(states)
    assert priors.shape == (2, game.num_actions) and priors.dtype == np.float32
    np.testing.assert_allclose(priors, 1 / game.num_actions)
    np.testing.assert_array_equal(values, np.zeros(2, np.float32))


def _net_evaluator(game, timer):
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    return NetworkEvaluator(game, net, "cpu", precision="fp32", timer=timer)


CONFIGS = {
    "puct": (SearchConfig(simulations=12), SelfplayConfig(temperature=1.0, temperature_moves=8)),
    "gumbel, cap": (
        SearchConfig(simulations=12, algorithm="gumbel", reuse_tree=False, max_considered_actions=4),
        SelfplayConfig(temperature=1.0, temperature_moves=8, full_search_probability=0.5,
                       fast_simulations=4)),
    "rollouts, several leaves": (
        SearchConfig(simulations=12, rollout_mix=0.5, leaves_per_game=2),
        SelfplayConfig(temperature=1.0, temperature_moves=8)),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("inner", ["network", "constant"])
def test_selfplay_with_a_timer_plays_the_same_games_and_charges_every_part(name, inner):
    game = make_game("connect4")
    search, selfplay = CONFIGS[name]
    seeds = [np.random.SeedSequence([11, k]) for k in range(6)]

    def play(timer):
        make = _net_evaluator if inner == "network" else lambda g, t: ConstantEvaluator(g, timer=t)
        ev = FixedBatchEvaluator(make(game, timer), batch=8, cache=50, timer=timer)  # small: evictions too
        stats, seen = SearchStats(), []
        t0 = time.perf_counter()
        records = play_selfplay_games(game, ev, search, selfplay, seeds, in_flight=3, stats=stats,
                                      timer=timer, on_game=lambda i, r: seen.append(i))
        wall = time.perf_counter() - t0
        return records, (ev.requested, ev.hits, ev.computed, stats.simulations, seen), wall

    plain, counts, _ = play(None)
    timer = PartTimer()
    timed, timed_counts, wall = play(timer)
    assert counts == timed_counts
    for a, b in zip(plain, timed, strict=True):
        assert a.actions == b.actions and a.result == b.result
        np.testing.assert_array_equal(a.policies, b.policies)
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.full, b.full)
    assert all(timer.seconds[part] > 0 for part in PARTS), timer.seconds
    assert timer.total <= wall



def test_the_coarse_split_is_the_sum_of_the_timers_parts():
    """SearchStats' network / tree / rules seconds are the part timer's (one timing mechanism):
    with a timer given, its parts summed; with none, self-play's own timer still fills them."""
    game = make_game("connect4")
    search, selfplay = CONFIGS["puct"]
    seeds = [np.random.SeedSequence([12, k]) for k in range(4)]
    timer, stats = PartTimer(), SearchStats()
    ev = FixedBatchEvaluator(_net_evaluator(game, timer), batch=8, cache=50, timer=timer)
    play_selfplay_games(game, ev, search, selfplay, seeds, in_flight=2, stats=stats, timer=timer)
    s = timer.seconds
    assert stats.network_s == pytest.approx(s["encoding"] + s["cache"] + s["batching"] + s["network"])
    assert stats.tree_s == pytest.approx(s["tree"]) and stats.rules_s == pytest.approx(s["rules"])
    untimed = SearchStats()
    play_selfplay_games(game, FixedBatchEvaluator(_net_evaluator(game, None), batch=8), search, selfplay,
                        seeds, in_flight=2, stats=untimed)
    assert untimed.network_s > 0 and untimed.tree_s > 0 and untimed.rules_s > 0
    assert untimed.simulations == stats.simulations
