from functools import cache

import numpy as np
import pytest

from zeroloop.engine.games import TicTacToe, make_game
from zeroloop.engine.nn import uniform_evaluator
from zeroloop.engine.perfect import PerfectConnectFour, PerfectTicTacToe
from zeroloop.engine.players import GreedyPlayer, MCTSPlayer, RandomPlayer, UCTPlayer
from zeroloop.engine.search import SearchConfig

TTT = TicTacToe()


@cache
def minimax(me: int, opp: int, ply: int) -> int:
    """Independent reference: game value (+1/0/-1) for the side to move."""
    s = TTT.play([], None)
    s = type(s)(me, opp, ply)
    best = -2
    for a in np.flatnonzero(TTT.legal_mask(s)):
        t = TTT.apply(s, int(a))
        v = -t.outcome if t.outcome is not None else -minimax(t.me, t.opp, t.ply)
        best = max(best, v)
    return best


def value(s):
    return s.outcome if s.outcome is not None else minimax(s.me, s.opp, s.ply)


def reachable(state, seen):
    key = (state.me, state.opp, state.ply)
    if key in seen or state.outcome is not None:
        return
    seen[key] = state
    for a in np.flatnonzero(TTT.legal_mask(state)):
        reachable(TTT.apply(state, int(a)), seen)


def test_perfect_tictactoe_keeps_the_game_value_everywhere():
    positions: dict = {}
    reachable(TTT.initial_state(), positions)
    assert len(positions) == 4520  # non-terminal reachable positions of tic-tac-toe
    player = PerfectTicTacToe(np.random.default_rng(0))
    for s in positions.values():
        for a, score in player.scores(s).items():
            assert np.sign(score) == -value(TTT.apply(s, a))
        move = player.move(s)
        # the chosen move keeps the position's game-theoretic value: never loses a won/drawn game
        assert -value(TTT.apply(s, move)) == value(s)


def test_perfect_tictactoe_never_loses_against_any_replies():
    player = PerfectTicTacToe(np.random.default_rng(0))

    def worst(state, perfect_side):
        if state.outcome is not None:
            mover_result = state.outcome if state.ply % 2 == perfect_side else -state.outcome
            return mover_result
        if state.ply % 2 == perfect_side:
            # every optimal choice of the perfect player
            scores = player.scores(state)
            best = max(scores.values())
            return min(worst(TTT.apply(state, a), perfect_side) for a, v in scores.items() if v == best)
        return min(worst(TTT.apply(state, int(a)), perfect_side)
                   for a in np.flatnonzero(TTT.legal_mask(state)))

    assert worst(TTT.initial_state(), 0) == 0  # as X: at least a draw, against anything
    assert worst(TTT.initial_state(), 1) == 0  # as O


@pytest.mark.parametrize("cls", [RandomPlayer, GreedyPlayer])
@pytest.mark.parametrize("name", ["tictactoe", "connect4", "othello-6x6", "gomoku"])
def test_simple_players_play_legal_moves(cls, name):
    game = make_game(name)
    player = cls(game, np.random.default_rng(0))
    s = game.initial_state()
    while s.outcome is None:
        a = player.choose([0], [s])[0]
        assert game.legal_mask(s)[a]
        s = game.apply(s, a)


@pytest.mark.parametrize("make", [
    lambda g: GreedyPlayer(g, np.random.default_rng(0)),
    lambda g: UCTPlayer(g, np.random.default_rng(0), playouts=600),
])
def test_greedy_and_uct_win_and_block(make):
    c4 = make_game("connect4")
    player = make(c4)
    assert c4.format_action(player.move(c4.play(c4.parse_moves("112233")))) == "4"
    assert c4.format_action(player.move(c4.play(c4.parse_moves("11223")))) == "4"
    assert TTT.format_action(make(TTT).move(TTT.play(TTT.parse_moves("152")))) == "3"


def test_perfect_connect4_uses_solver():
    pytest.importorskip("bitbully")
    c4 = make_game("connect4")
    player = PerfectConnectFour(np.random.default_rng(0))
    assert c4.format_action(player.move(c4.initial_state())) == "4"  # the centre wins
    scores = player.scores(c4.initial_state())
    assert scores[3] > 0 and all(v <= 0 for a, v in scores.items() if a != 3)
    assert c4.format_action(player.move(c4.play(c4.parse_moves("112233")))) == "4"
    assert c4.format_action(player.move(c4.play(c4.parse_moves("11223")))) == "4"
    # the second player's view: after 4 the best reply is 4 (score from O's side)
    s = c4.play(c4.parse_moves("4"))
    assert max(player.scores(s), key=player.scores(s).get) == 3


def test_mcts_player_batch_with_tree_reuse_beats_random():
    game = make_game("tictactoe")
    mcts = MCTSPlayer(game, uniform_evaluator(game), SearchConfig(simulations=300),
                      rng=np.random.default_rng(0))
    rnd = RandomPlayer(game, np.random.default_rng(1))
    n = 10
    mcts.new_games(n)
    rnd.new_games(n)
    states = {i: game.initial_state() for i in range(n)}
    # MCTS plays X in even games and O in odd games
    while any(s.outcome is None for s in states.values()):
        for side, player in ((0, mcts), (1, rnd)):
            idx = [i for i, s in states.items() if s.outcome is None and (s.ply + i) % 2 == side]
            if not idx:
                continue
            moves = player.choose(idx, [states[i] for i in idx])
            for i, a in zip(idx, moves):
                before = states[i]
                states[i] = game.apply(before, a)
                mcts.observe(i, before, a)
                rnd.observe(i, before, a)
    results = [s.outcome if (s.ply + i) % 2 == 0 else -s.outcome for i, s in states.items()]
    # result from the MCTS side: it must never lose tic-tac-toe to a random player
    assert min(results) >= 0, results
