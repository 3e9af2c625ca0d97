import numpy as np
import pytest

from zeroloop.engine.arena import make_openings, play_games
from zeroloop.engine.games import make_game
from zeroloop.engine.perfect import PerfectTicTacToe, perfect_scorer
from zeroloop.engine.players import RandomPlayer
from zeroloop.engine.positions import ILLEGAL, make_position_set, move_errors
from zeroloop.engine.rating import GateTest
from zeroloop.engine.search import SearchConfig
from zeroloop.pipeline.matches import PlayerSpec, play_match


def _replay(game, actions):
    s = game.initial_state()
    for a in actions:
        s = game.apply(s, a)
    return s


def test_games_are_colour_balanced_and_scored_from_a_s_view():
    game = make_game("tictactoe")
    rng = np.random.default_rng(0)
    openings = make_openings(game, 1, 5, rng)
    results = play_games(game, PerfectTicTacToe(rng, game), RandomPlayer(game, rng), openings)
    assert len(results) == 10
    assert [r.a_first for r in results] == [True, False] * 5
    for r in results:
        end = _replay(game, r.actions)
        assert end.outcome is not None
        # outcome is for the side to move at the end; A moved first iff A owns the even plies
        a_to_move = end.first_to_move == r.a_first
        assert r.result == (end.outcome if a_to_move else -end.outcome)
        assert r.result >= 0  # perfect play never loses, whatever the opening move


def test_pair_scores_average_each_openings_two_games():
    from zeroloop.engine.arena import MatchResult

    game = make_game("tictactoe")
    rng = np.random.default_rng(1)
    openings = make_openings(game, 2, 6, rng)
    m = MatchResult("a", "b", play_games(game, RandomPlayer(game, rng), RandomPlayer(game, rng), openings))
    pairs = m.pair_scores()
    assert len(pairs) == 6
    for k, x in enumerate(pairs):
        first, second = m.games[2 * k], m.games[2 * k + 1]
        assert first.actions[:2] == second.actions[:2] == openings[k] and first.a_first and not second.a_first
        assert x == pytest.approx(((first.result + 1) / 2 + (second.result + 1) / 2) / 2)
    assert np.mean(pairs) == pytest.approx(m.score.score)


def test_openings_are_distinct_legal_and_leave_the_game_running():
    game = make_game("connect4")
    ops = make_openings(game, 3, 20, np.random.default_rng(1))
    assert len({tuple(o) for o in ops}) == 20
    assert all(len(o) == 3 and _replay(game, o).outcome is None for o in ops)


def test_match_over_workers_counts_every_game():
    game = make_game("tictactoe")
    m = play_match(game, PlayerSpec("perfect", "perfect"), PlayerSpec("random", "random"), games=8,
                   opening_plies=0, seed=3, workers=2, progress=False)
    s = m.score
    assert s.games == 8 and s.losses == 0 and s.wins >= 4


def test_sprt_stops_a_lopsided_match_early():
    game = make_game("tictactoe")
    m = play_match(game, PlayerSpec("perfect", "perfect"), PlayerSpec("random", "random"), games=200,
                   opening_plies=0, seed=0, workers=1, sprt=GateTest().sprt(0.55), round_games=20,
                   progress=False)
    assert m.stopped_early == "accept" and m.score.games < 200
    assert m.verdict == "accept"  # the gate reads the verdict here instead of testing again


def test_mcts_player_spec_with_a_random_net_plays_legal_games():
    game = make_game("connect4")
    spec = PlayerSpec("mcts", "net", model=None, search=SearchConfig(simulations=4), device="cpu")
    m = play_match(game, spec, PlayerSpec("random", "random"), games=2, opening_plies=2, seed=0,
                   workers=1, progress=False)
    assert len(m.games) == 2 and all(_replay(game, g.actions).outcome is not None for g in m.games)
    with pytest.raises(ValueError, match="no perfect player"):
        PlayerSpec("perfect", "p").build(make_game("gomoku"), np.random.default_rng(0))


def _negamax(game, s):
    if s.outcome is not None:
        return s.outcome
    return max(-_negamax(game, game.apply(s, int(a))) for a in np.flatnonzero(game.legal_mask(s)))


def test_position_labels_agree_with_an_independent_search():
    game = make_game("tictactoe")
    ps = make_position_set(game, 25, np.random.default_rng(4), perfect_scorer(game))
    assert len(ps.moves) == 25
    for seq, row in zip(ps.moves, ps.labels):
        s = _replay(game, seq)
        legal = game.legal_mask(s)
        assert np.array_equal(row != ILLEGAL, legal)
        for a in np.flatnonzero(legal):
            assert row[a] == -_negamax(game, game.apply(s, int(a)))
        assert len(set(row[legal].tolist())) > 1  # kept only where the choice matters


def test_move_errors_count_moves_that_give_away_a_result():
    game = make_game("tictactoe")
    ps = make_position_set(game, 30, np.random.default_rng(5), perfect_scorer(game))
    best = [int(np.argmax(r)) for r in ps.labels]
    worst = [int(np.flatnonzero(r == r[r != ILLEGAL].min())[0]) for r in ps.labels]
    assert move_errors(ps, best).errors == 0
    assert move_errors(ps, worst).errors == 30
    with pytest.raises(ValueError, match="illegal"):
        move_errors(ps, [int(np.flatnonzero(r == ILLEGAL)[0]) if (r == ILLEGAL).any() else 0
                         for r in ps.labels])
