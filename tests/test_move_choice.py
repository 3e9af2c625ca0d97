"""One move choice: evaluation, tuning, matches and analysis play the move the
search chose, under PUCT and under Gumbel (engine/search/choice.py)."""

import io

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, PolicyValueNet
from zeroloop.engine.perfect import perfect_scorer
from zeroloop.engine.positions import make_position_set, move_mistakes
from zeroloop.engine.search import GREEDY, BatchedMCTS, MoveSchedule, chosen_moves, search_moves
from zeroloop.engine.search.tree import SearchResult
from zeroloop.pipeline.analysis import Analyser
from zeroloop.pipeline.data.storage import save_model
from zeroloop.pipeline.evaluation import policy_and_search_moves
from zeroloop.pipeline.matches import model_player
from zeroloop.pipeline.params import parse_params
from zeroloop.pipeline.tuning.objectives import TrialSettings, solver_correct, trial_moves


def _params(algorithm: str):
    return parse_params({
        "game": "tictactoe", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
        "mcts": {"algorithm": algorithm, "reuse_tree": algorithm == "puct", "c_puct": 1.5},
        "evaluate": {"simulations": 6}, "runtime": {"device": "cpu", "precision": "fp32"},
        "tune": {"simulations": 6, "rounds": 1, "metric": "solver"}})


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    game = make_game("tictactoe")
    torch.manual_seed(3)
    model = tmp_path_factory.mktemp("choice") / "model.pt"
    save_model(model, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)
    positions = make_position_set(game, 40, np.random.default_rng(5), perfect_scorer(game))
    return game, str(model), positions


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_evaluation_tuning_matches_and_analysis_choose_the_same_moves(setup, algorithm):
    game, model, positions = setup
    p = _params(algorithm)
    states = positions.states(game)
    _, evaluated = policy_and_search_moves(p, model, states)

    settings = TrialSettings(c_puct=p.mcts.c_puct, temperature=0.0, temperature_moves=0)
    ((rows, tuned),) = list(trial_moves(p, model, settings, states, seed=0))
    assert list(rows) == list(range(len(states)))
    correct = solver_correct(p, model, settings, positions, seed=0)

    player = model_player(p, model, "me", p.evaluate).build(game, np.random.default_rng(0))
    player.new_games(len(states))
    played = player.choose(list(range(len(states))), states)

    assert tuned == evaluated == played
    assert list(correct) == list(~move_mistakes(positions, evaluated))
    if algorithm == "puct":  # the analyser searches one position at a time, PUCT as configured
        analyser = Analyser.build("tictactoe", model, p.evaluate.simulations, device="cpu",
                                  c_puct=p.mcts.c_puct)
        lines = [game.format_moves(m) for m in positions.moves]
        answers = list(analyser.run(lines, io.StringIO()))
        assert [game.parse_moves(a["move"])[0] for a in answers] == evaluated


def test_gumbel_plays_the_halving_winner_not_the_most_visited(setup):
    """The bug this module removed: tuning took the most-visited move under
    Gumbel. With few simulations ties in visits are common, and the search's
    winner is not the first most-visited move on some positions."""
    game, model, positions = setup
    p = _params("gumbel")
    states = positions.states(game)
    _, evaluated = policy_and_search_moves(p, model, states)
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.pipeline.data.storage import load_model

    net, _, _ = load_model(model, game)
    mcts = BatchedMCTS(game, NetworkEvaluator(game, net, "cpu"), p.match_search(p.evaluate), len(states),
                       rng=np.random.default_rng(0))
    moves, res = search_moves(mcts, states)
    assert moves == evaluated == [int(a) for a in res.action]
    most_visited = res.visits.argmax(axis=1)
    assert (np.asarray(moves) != most_visited).any()


def test_chosen_moves_follow_the_schedule_and_each_rows_generator():
    visits = np.array([[1, 5, 4], [0, 2, 8]], np.float32)
    res = SearchResult(visits, np.zeros_like(visits), np.zeros(2, np.float32), np.full_like(visits, 1 / 3))
    assert chosen_moves(res, [0, 0]) == [1, 2]  # GREEDY: the most visited
    hot = MoveSchedule(temperature=1.0, temperature_moves=2)
    draws = [chosen_moves(res, [0, 5], hot, np.random.default_rng(s))[0] for s in range(200)]
    assert set(draws) == {0, 1, 2}  # sampled at ply 0 ...
    # ... and not at ply 5, past temperature_moves
    assert all(chosen_moves(res, [0, 5], hot, np.random.default_rng(s))[1] == 2 for s in range(20))
    # one generator per row: row 0's move depends on its own generator only
    a = chosen_moves(res, [0, 0], hot, [np.random.default_rng(1), np.random.default_rng(2)])
    b = chosen_moves(res, [0, 0], hot, [np.random.default_rng(1), np.random.default_rng(99)])
    assert a[0] == b[0]
    with pytest.raises(ValueError, match="needs a random generator"):
        chosen_moves(res, [0, 0], hot)
    # Gumbel: the halving's winner past the schedule (and in matches), before it a draw from the
    # improved policy, not from the visits
    improved = np.array([[0.0, 0.1, 0.9], [0.7, 0.3, 0.0]], np.float32)
    gumbel = SearchResult(visits, visits, np.zeros(2, np.float32), visits, improved, np.array([2, 0]))
    assert chosen_moves(gumbel, [5, 9], hot) == chosen_moves(gumbel, [0, 0]) == [2, 0]
    draws = np.array([chosen_moves(gumbel, [0, 0], hot, np.random.default_rng(s)) for s in range(400)])
    assert set(draws[:, 0]) == {1, 2} and set(draws[:, 1]) == {0, 1}  # row 1: move 0, never visited
    assert abs((draws[:, 0] == 2).mean() - 0.9) < 0.06 and abs((draws[:, 1] == 0).mean() - 0.7) < 0.08
    with pytest.raises(ValueError, match="needs a random generator"):
        chosen_moves(gumbel, [0, 0], hot)
    assert GREEDY.temperature_at(0) == 0.0
