import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, NetworkEvaluator, PolicyValueNet, uniform_evaluator
from zeroloop.engine.search import BatchedMCTS, MoveSchedule, SearchConfig, choose_move, visit_policy
from zeroloop.engine.selfplay import play_selfplay_games


def search_position(name, moves, sims=200, **cfg):
    game = make_game(name)
    mcts = BatchedMCTS(game, uniform_evaluator(game), SearchConfig(simulations=sims, **cfg), 1,
                       rng=np.random.default_rng(0))
    mcts.set_root(0, game.play(game.parse_moves(moves)))
    res = mcts.search([0])
    return game, res


@pytest.mark.parametrize("leaves", [1, 4])
@pytest.mark.parametrize("name,moves,win", [
    ("tictactoe", "1425", "3"),   # X: 1,2 -> 3 completes the top row
    ("tictactoe", "5172", "3"),   # X: 5,7 -> 3 completes the anti-diagonal
    ("connect4", "112233", "4"),  # X: bottom 1-3 -> 4
    ("connect4", "121212", "1"),  # X: three in column 1 -> 1
])
def test_finds_win_in_one(name, moves, win, leaves):
    game, res = search_position(name, moves, leaves_per_game=leaves)
    assert game.format_action(int(res.visits[0].argmax())) == win
    assert res.value[0] > 0.5


@pytest.mark.parametrize("name,moves,block", [
    ("tictactoe", "152", "3"),     # X threatens 3; O has no win
    ("tictactoe", "5397", "1"),    # X: 5,9 threatens 1; O (3,7) has no win
    ("connect4", "11223", "4"),    # X: bottom 1-3, O to move must block 4
    ("connect4", "17171", "1"),    # X: three in column 1, O must block on top
])
def test_blocks_loss_in_one(name, moves, block):
    game, res = search_position(name, moves, sims=300)
    assert game.format_action(int(res.visits[0].argmax())) == block


@pytest.mark.parametrize("name,moves", [("tictactoe", ""), ("connect4", "44"), ("gomoku", ""),
                                        ("othello-6x6", "")])
@pytest.mark.parametrize("leaves", [1, 3])
def test_visit_counts_sum_to_simulations(name, moves, leaves):
    _, res = search_position(name, moves, sims=123, leaves_per_game=leaves)
    assert res.visits.sum() == 123


def test_visit_schedule_explores_more_than_the_constant():
    # X can win at 3: a constant c puts nearly every visit there; the AlphaZero schedule with a
    # small c_base grows c with the visits and so spreads them over the other moves
    _, const = search_position("tictactoe", "1425", sims=200, c_puct=1.0)
    _, sched = search_position("tictactoe", "1425", sims=200, c_puct=1.0, c_base=0.01)
    share = lambda r: r.visits[0][2] / r.visits[0].sum()  # noqa: E731
    assert const.visits[0].argmax() == sched.visits[0].argmax() == 2
    assert share(const) > 0.9 and share(sched) < 0.7


def test_first_play_urgency_decides_whether_unvisited_moves_are_tried():
    # values are 0 everywhere: an unvisited move valued +1 is tried before any second visit,
    # one valued -1 is never preferred to a visited move within a few simulations
    _, hopeful = search_position("connect4", "", sims=8, fpu=1.0)
    _, doubtful = search_position("connect4", "", sims=8, fpu=-1.0)
    assert (hopeful.visits[0] > 0).sum() == 7
    assert (doubtful.visits[0] > 0).sum() == 1


def skewed_evaluator(game):
    base = np.exp(np.linspace(0, 2, game.num_actions)).astype(np.float32)

    def ev(states):
        return np.tile(base, (len(states), 1)), np.zeros(len(states), np.float32)

    return ev, base


def test_noise_touches_only_the_root():
    game = make_game("connect4")
    ev, base = skewed_evaluator(game)
    expected = base / base.sum()
    mcts = BatchedMCTS(game, ev, SearchConfig(simulations=200, dirichlet_epsilon=0.25), 1,
                       rng=np.random.default_rng(1))
    mcts.set_root(0, game.initial_state())
    res = mcts.search([0], add_noise=True)
    assert not np.allclose(res.priors[0], expected, atol=1e-4)
    assert res.priors[0].sum() == pytest.approx(1.0, abs=1e-5)
    root = mcts.roots[0]
    children = {a: mcts.prior[c] for a, c in enumerate(mcts.child[root]) if c >= 0 and mcts.node_kind[c] == 1}
    assert len(children) == 7
    for priors in children.values():
        np.testing.assert_allclose(priors, expected, rtol=1e-5)
    # without noise the root keeps the evaluator's priors
    mcts.set_root(0, game.initial_state())
    np.testing.assert_allclose(mcts.search([0]).priors[0], expected, rtol=1e-5)


def test_temperature_zero_picks_most_visited():
    visits = np.array([3.0, 10.0, 10.0, 50.0, 2.0])
    rng = np.random.default_rng(0)
    assert choose_move(visits, 0.0, rng) == 3
    np.testing.assert_array_equal(visit_policy(visits, 0.0), [0, 0, 0, 1, 0])
    np.testing.assert_allclose(visit_policy(visits, 1.0), visits / visits.sum())
    sharp = visit_policy(visits, 0.5)
    np.testing.assert_allclose(sharp, visits**2 / (visits**2).sum())
    picks = [choose_move(visits, 1.0, rng) for _ in range(400)]
    assert set(picks) > {3}  # temperature 1 explores
    assert MoveSchedule(temperature=1.0, temperature_moves=4).temperature_at(4) == 0.0


def test_tree_reuse_keeps_the_played_subtree():
    game = make_game("connect4")
    mcts = BatchedMCTS(game, uniform_evaluator(game), SearchConfig(simulations=200), 1,
                       rng=np.random.default_rng(0))
    mcts.set_root(0, game.initial_state())
    res = mcts.search([0])
    a = int(res.visits[0].argmax())
    kept = res.visits[0, a]
    mcts.advance(0, a)
    # the child's own edges saw every simulation through it but the first (its expansion)
    assert mcts.edge_n[mcts.roots[0]].sum() == kept - 1
    res2 = mcts.search([0])
    assert res2.visits.sum() == kept - 1 + 200
    off = BatchedMCTS(game, uniform_evaluator(game), SearchConfig(simulations=200, reuse_tree=False),
                      1, rng=np.random.default_rng(0))
    off.set_root(0, game.initial_state())
    off.search([0])
    off.advance(0, a)
    assert off.search([0]).visits.sum() == 200


def test_many_slots_search_independent_positions():
    game = make_game("tictactoe")
    mcts = BatchedMCTS(game, uniform_evaluator(game), SearchConfig(simulations=200), 3,
                       rng=np.random.default_rng(0))
    for slot, moves in enumerate(["1425", "152", "5172"]):
        mcts.set_root(slot, game.play(game.parse_moves(moves)))
    res = mcts.search([0, 1, 2])
    assert [int(v.argmax()) + 1 for v in res.visits] == [3, 3, 3]
    assert (res.visits.sum(axis=1) == 200).all()


def test_rollout_mix_runs_and_keeps_counts():
    _, res = search_position("connect4", "4", sims=50, rollout_mix=0.5)
    assert res.visits.sum() == 50


def test_search_rejects_finished_game_and_bad_config():
    game = make_game("tictactoe")
    mcts = BatchedMCTS(game, uniform_evaluator(game), SearchConfig(simulations=8), 1,
                       rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="finished"):
        mcts.set_root(0, game.play(game.parse_moves("12457")))
    with pytest.raises(ValueError, match="c_puct"):
        SearchConfig(c_puct=-1)


def random_net_evaluator(game, seed=0):
    torch.manual_seed(seed)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    return NetworkEvaluator(game, net, "cpu")


def test_seeded_selfplay_is_reproducible():
    game = make_game("connect4")
    ev = random_net_evaluator(game)

    def run(seed):
        seeds = [np.random.SeedSequence([seed, k]) for k in range(6)]
        return play_selfplay_games(game, ev, SearchConfig(simulations=16), MoveSchedule(), seeds, in_flight=4)

    a, b, c = run(7), run(7), run(8)
    assert [r.actions for r in a] == [r.actions for r in b]
    for ra, rb in zip(a, b):
        np.testing.assert_array_equal(ra.policies, rb.policies)
        assert ra.result == rb.result
    assert [r.actions for r in a] != [r.actions for r in c]
    for r in a:
        assert len(r.actions) == len(r.policies) == len(r.values)
        np.testing.assert_allclose(r.policies.sum(axis=1), 1.0, rtol=1e-5)
        final = game.play(r.actions)
        assert final.outcome is not None
        assert r.result in (-1.0, 0.0, 1.0)
