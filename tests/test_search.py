from dataclasses import replace

import numpy as np
import pytest
import torch

from zeroloop.engine.games import make_game
from zeroloop.engine.nn import NetConfig, NetworkEvaluator, PolicyValueNet, uniform_evaluator
from zeroloop.engine.search import BatchedMCTS, MoveSchedule, SearchConfig, choose_move, visit_policy
from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games

#: self-play that samples its first 10 plies from the visits, then plays the most-visited move
SAMPLED_10 = SelfplayConfig(temperature_moves=10)


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


def one_node_tree(prior, edge_n, edge_w, node_value):
    """A tree of one expanded node (row 0) with these edge statistics, all moves legal."""
    from zeroloop.engine.search.kernels import EXPANDED, Tree

    tree = Tree.empty(1, len(prior))
    tree.prior[0], tree.edge_n[0], tree.edge_w[0], tree.legal[0] = prior, edge_n, edge_w, True
    tree.node_kind[0], tree.node_value[0], tree.node_n[0] = EXPANDED, node_value, sum(edge_n)
    return tree


def test_fpu_reduction_values_an_unvisited_move_below_what_the_node_has_seen():
    from zeroloop.engine.search.kernels import unvisited_value

    tree = one_node_tree([0.3, 0.2, 0.5], [1.0, 2.0, 0.0], [0.4, -0.2, 0.0], 0.2)
    # mean (0.2 + 0.4 - 0.2) / (1 + 3) = 0.1, visited prior mass 0.5
    assert unvisited_value(tree, 0, 0.7, 0.5) == pytest.approx(0.1 - 0.5 * np.sqrt(0.5), abs=1e-6)
    assert unvisited_value(tree, 0, 0.7, -1.0) == pytest.approx(0.7)
    # nothing visited yet: the node's own value, no reduction
    fresh = one_node_tree([0.3, 0.2, 0.5], [0.0] * 3, [0.0] * 3, 0.2)
    assert unvisited_value(fresh, 0, 0.7, 0.5) == pytest.approx(0.2)


def test_fpu_reduction_narrows_the_search_as_it_grows():
    # values 0 everywhere, uniform priors: no reduction tries every move first, a large one
    # keeps revisiting the moves it has seen
    tried = [int((search_position("connect4", "", sims=8, fpu_reduction=r)[1].visits[0] > 0).sum())
             for r in (0.0, 0.3, 2.0)]
    assert tried[0] == 7 and tried[0] > tried[1] > tried[2] >= 1, tried


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
    tree, root = mcts.tree, mcts.slots.root[0]
    children = {a: tree.prior[c] for a, c in enumerate(tree.child[root]) if c >= 0 and tree.node_kind[c] == 1}
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
    assert mcts.tree.edge_n[mcts.slots.root[0]].sum() == kept - 1
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
        return play_selfplay_games(game, ev, SearchConfig(simulations=16), SAMPLED_10, seeds, in_flight=4)

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


def test_playout_cap_records_full_searches_only():
    from zeroloop.engine.nn import uniform_evaluator
    from zeroloop.engine.search import SearchStats
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games, records_to_arrays

    game = make_game("connect4")
    seeds = [np.random.SeedSequence([5, k]) for k in range(6)]
    cfg, sched = SearchConfig(simulations=24), SelfplayConfig(temperature=1.0, temperature_moves=42)
    plain = play_selfplay_games(game, uniform_evaluator(game), cfg, sched, seeds, in_flight=3)
    assert all(r.full.all() for r in plain)
    assert "full" not in records_to_arrays(game, plain)  # shards without a cap are as before
    stats = SearchStats()
    capped = play_selfplay_games(game, uniform_evaluator(game), cfg,
                                 replace(sched, full_search_probability=0.25, fast_simulations=4), seeds,
                                 in_flight=3, stats=stats)
    full = np.concatenate([r.full for r in capped])
    assert 0.1 < full.mean() < 0.45  # about a quarter of the moves were full searches
    moves = len(full)
    assert stats.simulations == 24 * full.sum() + 4 * (moves - full.sum())
    arrays = records_to_arrays(game, capped)
    np.testing.assert_array_equal(arrays["full"], full)
    for r in capped:
        assert len(r.policies) == len(r.full) == len(r.actions)
        assert np.allclose(r.policies.sum(axis=1), 1.0, atol=1e-5)
    # every move a full search: the cap changes nothing but the draw per move
    every = play_selfplay_games(game, uniform_evaluator(game), cfg,
                                replace(sched, full_search_probability=1.0, fast_simulations=4), seeds,
                                in_flight=3)
    assert all(r.full.all() for r in every)


def _connect4_selfplay(key: int, games: int, simulations: int, in_flight: int):
    """Connect Four self-play of uniform priors, moves sampled to the end:
    ``play(**options)`` plays the same seeded games with other options."""
    game = make_game("connect4")
    seeds = [np.random.SeedSequence([key, k]) for k in range(games)]
    cfg, sched = SearchConfig(simulations=simulations), SelfplayConfig(temperature=1.0, temperature_moves=42)

    def play(stats=None, **options):
        return play_selfplay_games(game, uniform_evaluator(game), cfg, replace(sched, **options), seeds,
                                   in_flight=in_flight, stats=stats)
    return game, play


def test_archive_starts_replay_archived_positions_that_are_not_trained_on():
    """Go-Exploit: a share of the games starts from a position of the archive's
    games, reached by replaying their moves (kept, not trained on); the rest,
    and every game of an empty archive or of a share of 0, are the plain games."""
    game, play = _connect4_selfplay(8, games=40, simulations=8, in_flight=8)
    plain = play()
    archive = tuple(tuple(r.actions) for r in play(temperature_moves=42)[:10])
    sched = SelfplayConfig(temperature=1.0, temperature_moves=42, archive_starts=0.5)

    seeds = [np.random.SeedSequence([8, k]) for k in range(40)]

    def started(**options):
        return play_selfplay_games(game, uniform_evaluator(game), SearchConfig(simulations=8), sched, seeds,
                                   in_flight=8, **options)
    games = started(archive=archive)
    deep = 0
    for r in games:
        k = int(np.argmax(r.full))
        assert not r.full[:k].any() and r.full[k:].all() and game.play(r.actions).outcome is not None
        # the replayed moves are a prefix of an archived game that goes on from there
        assert any(a[:k] == tuple(r.actions[:k]) and len(a) > k for a in archive)
        deep += k > 6  # an archived position some plies in
    assert 5 <= deep <= 35
    assert [r.actions for r in started(archive=archive)] == [r.actions for r in games]  # seeded
    assert [r.actions for r in started(archive=())] == [r.actions for r in plain]  # nothing to draw
    assert [r.actions for r in play(archive_starts=0.0)] == [r.actions for r in plain]


def test_training_reads_only_the_full_searches(tmp_path):
    from zeroloop.engine.nn import uniform_evaluator
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games, records_to_arrays
    from zeroloop.pipeline.data.storage import save_shard
    from zeroloop.pipeline.training.replay import load_replay

    game = make_game("tictactoe")
    recs = play_selfplay_games(game, uniform_evaluator(game), SearchConfig(simulations=8),
                               SelfplayConfig(temperature_moves=9, full_search_probability=0.5,
                                              fast_simulations=2),
                               [np.random.SeedSequence([1, k]) for k in range(8)])
    arrays = records_to_arrays(game, recs)
    path = tmp_path / "shard.zls"
    save_shard(path, arrays, {"identity": {"game": "tictactoe"}})
    data = load_replay(game, [path])
    assert len(data) == int(arrays["full"].sum()) < len(arrays["z"])
    np.testing.assert_array_equal(data.z, arrays["z"][arrays["full"]].astype(np.float32))


# ---------------------------------------------------------------- Gumbel AlphaZero

def _gumbel(sims, **cfg):
    return SearchConfig(simulations=sims, algorithm="gumbel", reuse_tree=False, **cfg)


@pytest.mark.parametrize("m, n, expected", [
    # m = 4, n = 16: two phases; 4 moves x 2 visits, then 2 moves x 4 visits (the paper's example sizes)
    (4, 16, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]),
    # m = 7 (Connect Four), n = 16: ceil(log2 7) = 3 phases; 16 // 21 < 1 so one visit each, then 3
    # moves x 1, then the last two share the rest
    (7, 16, [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4]),
    (2, 5, [0, 0, 1, 1, 2]),
    (1, 4, [0, 1, 2, 3]),
])
def test_sequential_halving_schedule_by_hand(m, n, expected):
    from zeroloop.engine.search.moves import considered_visits

    assert considered_visits(m, n) == expected


def test_sequential_halving_spends_the_budget_on_the_better_half():
    # uniform priors and values: four considered moves, the one the halving keeps gets most visits
    game = make_game("connect4")
    mcts = BatchedMCTS(game, uniform_evaluator(game), _gumbel(16, max_considered_actions=4), 1,
                       rng=np.random.default_rng(3))
    mcts.set_root(0, game.initial_state())
    res = mcts.search([0], add_noise=True)
    visits = np.sort(res.visits[0])[::-1]
    assert visits.sum() == 16 and (res.visits[0] > 0).sum() == 4  # only the 4 considered moves
    assert list(visits[:4]) == [6, 6, 2, 2]  # 2 each in phase one, then 4 more for each of two
    assert res.visits[0][res.action[0]] == 6


def test_improved_policy_from_completed_q_by_hand():
    from zeroloop.engine.search.kernels import improved_policy
    from zeroloop.engine.search.tree import kernel_params

    tree = one_node_tree([0.5, 0.3, 0.2], [2.0, 1.0, 0.0], [1.0, -1.0, 0.0], 0.1)  # q = 0.5, -1.0, unvisited
    q, p = np.zeros(3), np.zeros(3)
    fixed, minmax = (kernel_params(_gumbel(8, c_visit=50.0, c_scale=0.1, gumbel_q=rule), self_play=False)
                     for rule in ("fixed", "minmax"))
    improved_policy(tree, 0, fixed, q, p)
    # v_mix = (0.1 + 3 * (0.5 * 0.5 + 0.3 * -1.0) / 0.8) / (1 + 3) = -0.021875
    v_mix = (0.1 + 3 * (0.5 * 0.5 + 0.3 * -1.0) / 0.8) / 4
    np.testing.assert_allclose(q, [0.5, -1.0, v_mix], atol=1e-6)
    sigma = (50.0 + 2.0) * 0.1 * 0.5 * (np.array([0.5, -1.0, v_mix]) + 1.0)
    logits = np.log([0.5, 0.3, 0.2]) + sigma
    np.testing.assert_allclose(p, np.exp(logits) / np.exp(logits).sum(), atol=1e-6)
    # mcts.gumbel_q: minmax: the completed Qs rescaled over the node, (q - min) / (max - min), into sigma
    improved_policy(tree, 0, minmax, q, p)
    unit = (np.array([0.5, -1.0, v_mix]) + 1.0) / 1.5
    np.testing.assert_allclose(q, 2 * unit - 1, atol=1e-6)
    logits = np.log([0.5, 0.3, 0.2]) + (50.0 + 2.0) * 0.1 * unit
    np.testing.assert_allclose(p, np.exp(logits) / np.exp(logits).sum(), atol=1e-6)


def test_gumbel_search_policy_target_and_move_by_hand():
    """A whole Gumbel search on a root small enough to follow by hand.

    Connect Four's opening, no Gumbel noise, 4 considered moves, 6 simulations,
    c_visit 3, c_scale 0.5. The oracle gives every position the same priors;
    the root is worth -0.5, each child a fixed value, every grandchild +0.3
    (from its side to move, the root's player). Q in [-1, 1] is mapped to
    [0, 1] by (q + 1) / 2, the game's fixed bounds (kernels.py; not mctx's
    min-max over the root's children), so
    sigma(q) = (c_visit + max_b N(b)) * c_scale * (q + 1) / 2.
    """
    game = make_game("connect4")
    root = game.initial_state()
    prior = np.array([0.04, 0.12, 0.25, 0.30, 0.15, 0.10, 0.04])
    first_q = np.array([0.0, -0.8, -0.1, -0.5, 0.9, 0.0, 0.0])  # Q(root, a) of a child's own value
    child_value = {game.apply(root, a): -first_q[a] for a in range(7)}  # from the child's side to move

    def oracle(states):
        values = [-0.5 if s == root else child_value[s] if s.ply == 1 else 0.3 for s in states]
        assert all(s.ply <= 2 for s in states)  # 6 simulations never go deeper
        return np.tile(prior.astype(np.float32), (len(states), 1)), np.asarray(values, np.float32)

    c_visit, c_scale = 3.0, 0.5
    cfg = _gumbel(6, max_considered_actions=4, c_visit=c_visit, c_scale=c_scale)
    mcts = BatchedMCTS(game, oracle, cfg, 1, rng=np.random.default_rng(0))
    mcts.set_root(0, root)
    res = mcts.search([0])  # no noise: the considered moves are the 4 likeliest, 3, 2, 4, 1

    def sigma(q, max_n):
        return (c_visit + max_n) * c_scale * (np.asarray(q) + 1.0) / 2.0

    # Sequential halving, schedule [0, 0, 0, 0, 1, 1]: one visit each to 3, 2, 4, 1; then two moves
    # get a second visit, picked by log prior + sigma among those with one visit:
    #   simulation 5 (max N 1, sigma = q + 1): 4: log .15 + 1.9 = 0.003 beats 2: log .25 + 0.9 = -0.486,
    #     3: log .30 + 0.5 = -0.704, 1: log .12 + 0.2 = -1.92
    #   simulation 6 (max N 2, sigma = 1.25 (q + 1)): 2: -1.386 + 1.125 = -0.261 beats 3: -1.204 + 0.625
    # (the likeliest move, 3, gets no second visit: sigma decided). A second visit reaches a grandchild
    # worth +0.3 to the root's player, so Q(a) = (first_q[a] + 0.3) / 2 there.
    assert sigma(0.9, 1) + np.log(0.15) > sigma(-0.1, 1) + np.log(0.25) > sigma(-0.5, 1) + np.log(0.30)
    assert sigma(-0.1, 2) + np.log(0.25) > sigma(-0.5, 2) + np.log(0.30)
    visits = np.array([0, 1, 2, 1, 2, 0, 0], np.float64)
    q = np.array([0.0, -0.8, (-0.1 + 0.3) / 2, -0.5, (0.9 + 0.3) / 2, 0.0, 0.0])  # 0 where unvisited
    np.testing.assert_array_equal(res.visits[0], visits)
    np.testing.assert_allclose(res.q[0], q, atol=1e-6)

    # completed Q: an unvisited move gets v_mix = (v_root + sum N * sum_vis p q / sum_vis p) / (1 + sum N)
    seen = visits > 0
    v_mix = (-0.5 + visits.sum() * (prior[seen] * q[seen]).sum() / prior[seen].sum()) / (1 + visits.sum())
    weighted = (0.12 * -0.8 + 0.25 * 0.1 + 0.30 * -0.5 + 0.15 * 0.6) / (0.12 + 0.25 + 0.30 + 0.15)
    assert v_mix == pytest.approx((-0.5 + 6 * weighted) / 7)
    completed = np.where(seen, q, v_mix)

    def softmax_of(logits):
        e = np.exp(logits - logits.max())
        return e / e.sum()

    expected = softmax_of(np.log(prior) + sigma(completed, visits.max()))  # max N = 2: sigma = 1.25 (q + 1)
    np.testing.assert_allclose(expected, [0.0326, 0.0468, 0.3000, 0.1701, 0.3363, 0.0816, 0.0326], atol=1e-4)
    np.testing.assert_allclose(res.policy[0], expected, atol=1e-5)
    # the expected numbers tell a wrong sigma apart: each of these misses them by more than 0.02
    wrong = {
        "c_scale doubled": softmax_of(np.log(prior) + 2 * sigma(completed, visits.max())),
        "sum N for max N": softmax_of(np.log(prior) + sigma(completed, visits.sum())),
        "q unnormalised": softmax_of(np.log(prior) + (c_visit + visits.max()) * c_scale * completed),
        "min-max q (mctx)": softmax_of(np.log(prior) + (c_visit + visits.max()) * c_scale
                                       * (completed - completed.min()) / (completed.max() - completed.min())),
        "v_root for v_mix": softmax_of(np.log(prior) + sigma(np.where(seen, q, -0.5), visits.max())),
        "visit counts": visits / visits.sum(),
        "prior": prior,
    }
    for name, other in wrong.items():
        assert np.abs(other - expected).max() > 0.02, name

    # mcts.gumbel_q: minmax (mctx's rescale_values): the same search with Q min-max scaled over the root,
    # in the halving and in the policy target; the target follows from its own visits and Qs
    cfg_mm = _gumbel(6, max_considered_actions=4, c_visit=c_visit, c_scale=c_scale, gumbel_q="minmax")
    mm = BatchedMCTS(game, oracle, cfg_mm, 1, rng=np.random.default_rng(0))
    mm.set_root(0, root)
    res_mm = mm.search([0])
    n, qm = res_mm.visits[0].astype(np.float64), res_mm.q[0].astype(np.float64)
    seen_mm = n > 0
    mix = (-0.5 + n.sum() * (prior[seen_mm] * qm[seen_mm]).sum() / prior[seen_mm].sum()) / (1 + n.sum())
    comp = np.where(seen_mm, qm, mix)
    unit = (comp - comp.min()) / (comp.max() - comp.min())
    target = softmax_of(np.log(prior) + (c_visit + n.max()) * c_scale * unit)
    np.testing.assert_allclose(res_mm.policy[0], target,
                               atol=1e-5)
    assert np.abs(res_mm.policy[0] - expected).max() > 0.02  # not the fixed mapping's target

    # The move: among the most visited considered moves (2 and 4), the largest log prior + sigma(Q):
    # 4: log .15 + 1.25 * 1.6 = 0.103 beats 2: log .25 + 1.25 * 1.1 = -0.011. Neither the likeliest
    # move (3), nor the first most visited (2), nor the likelier of the two (2).
    assert np.log(0.15) + sigma(0.6, 2) > np.log(0.25) + sigma(0.1, 2)
    assert res.action[0] == 4


def _threat_oracle(game):
    """Uniform priors; value +1 when the side to move can win at once, else 0."""
    def ev(states):
        values = [float(any(game.apply(st, int(a)).outcome is not None
                            for a in np.flatnonzero(game.legal_mask(st)))) for st in states]
        return np.ones((len(states), game.num_actions), np.float32), np.asarray(values, np.float32)
    return ev


@pytest.mark.parametrize("moves, best, sims", [
    ("112233", "4", 7),   # X to move wins at once with 4: one visit per move shows it
    ("11223", "4", 7),    # O to move: every move but 4 lets X win next (the oracle's value says so)
    ("445566", "37", 8),  # X wins at once at either end of the bottom row
])
def test_gumbel_finds_a_forced_win_or_the_only_defence_with_few_simulations(moves, best, sims):
    game = make_game("connect4")
    for seed in range(5):  # whatever the Gumbel noise
        mcts = BatchedMCTS(game, _threat_oracle(game), _gumbel(sims), 1, rng=np.random.default_rng(seed))
        mcts.set_root(0, game.play(game.parse_moves(moves)))
        res = mcts.search([0], add_noise=True)
        assert game.format_moves([int(res.action[0])]) in best
        assert res.policy[0][res.action[0]] == pytest.approx(res.policy[0].max())  # the policy agrees


def test_gumbel_needs_a_fresh_tree_and_one_leaf_per_step():
    with pytest.raises(ValueError, match="set mcts.reuse_tree: false"):
        SearchConfig(algorithm="gumbel")
    with pytest.raises(ValueError, match="leaves_per_game: 1"):
        SearchConfig(algorithm="gumbel", reuse_tree=False, leaves_per_game=4)


def test_gumbel_selfplay_is_reproducible():
    from zeroloop.engine.nn import uniform_evaluator as uni
    from zeroloop.engine.selfplay import play_selfplay_games

    game = make_game("tictactoe")
    seeds = [np.random.SeedSequence([2, k]) for k in range(6)]
    runs = [play_selfplay_games(game, uni(game), _gumbel(8), SAMPLED_10, seeds, in_flight=k)
            for k in (1, 4)]
    assert [r.actions for r in runs[0]] == [r.actions for r in runs[1]]
    for rec in runs[0]:
        assert np.allclose(rec.policies.sum(axis=1), 1.0, atol=1e-5)
    # Gumbel noise makes the games differ from one another
    assert len({tuple(r.actions) for r in runs[0]}) > 1


def test_gumbel_selfplay_records_the_improved_policy_and_plays_the_halving_winner(monkeypatch):
    """Each recorded policy is its search's improved policy (not the visit
    distribution) and each move past ``temperature_moves`` the sequential
    halving's winner (here every move: the paper's rule), for every game of a
    batch (two games share each search; the Gumbel noise, with 4 of the legal
    moves considered, makes them differ). Within ``temperature_moves`` the
    move is drawn from the improved policy instead (AlphaZero.jl issue 217):
    some moves then are not the winner, none outside the policy."""
    from zeroloop.engine import selfplay

    game = make_game("tictactoe")
    base = np.exp(np.linspace(0, 2, game.num_actions)).astype(np.float32)

    def oracle(states):  # skewed priors, values that vary with the position: sigma matters
        values = [np.sin(0.37 * s.me + 0.61 * s.opp) for s in states]
        return np.tile(base, (len(states), 1)), np.asarray(values, np.float32)

    searched = []  # (slot, root state, SearchResult row) per searched slot, in order

    class Recorded(BatchedMCTS):
        def search(self, slots, **kw):
            res = super().search(slots, **kw)
            for j, g in enumerate(slots):
                searched.append((int(g), self.root_state(int(g)), res.policy[j].copy(), int(res.action[j]),
                                 res.visits[j].copy()))
            return res

    monkeypatch.setattr(selfplay, "BatchedMCTS", Recorded)
    seeds = [np.random.SeedSequence([4, k]) for k in range(2)]
    records = selfplay.play_selfplay_games(game, oracle, _gumbel(8, max_considered_actions=4), SAMPLED_10,
                                           seeds, in_flight=2)
    not_winner = 0
    for slot, rec in enumerate(records):  # every ply of tic-tac-toe is within 10: all drawn
        mine = [s for s in searched if s[0] == slot]
        assert len(mine) == len(rec.actions)
        for t, (_, _, policy, action, _) in enumerate(mine):
            assert policy[rec.actions[t]] > 0
            not_winner += rec.actions[t] != action
    assert not_winner >= 1
    searched.clear()
    records = selfplay.play_selfplay_games(game, oracle, _gumbel(8, max_considered_actions=4),
                                           SelfplayConfig(temperature_moves=0), seeds, in_flight=2)
    assert records[0].actions != records[1].actions  # the noise picks other moves: the rows differ
    differs_from_visits = halving_not_most_visited = 0
    for slot, rec in enumerate(records):  # two games, two slots: game k plays in slot k
        mine = [s for s in searched if s[0] == slot]
        assert len(mine) == len(rec.actions) >= 5
        for t, (_, state, policy, action, visits) in enumerate(mine):
            assert state == game.play(rec.actions[:t])
            np.testing.assert_array_equal(rec.policies[t], policy.astype(np.float32))
            assert rec.actions[t] == action
            if game.legal_mask(state).sum() > 1:
                assert np.abs(rec.policies[t] - visits / visits.sum()).max() > 1e-3
                differs_from_visits += 1
            halving_not_most_visited += action != int(visits.argmax())
    assert differs_from_visits >= 8
    assert halving_not_most_visited >= 1  # so the check on the move tells it from the most visited one


def test_policy_target_pruning_by_hand():
    from zeroloop.engine.search.tree import pruned_visits

    visits = np.array([40.0, 8.0, 3.0, 1.0, 0.0])
    q = np.array([0.5, 0.1, 0.45, 0.2, 0.0])
    prior = np.array([0.4, 0.3, 0.1, 0.1, 0.1])
    scale = 1.25 * np.sqrt(52.0)
    out = pruned_visits(visits, q, prior, scale, forced_k=2.0)
    best_score = 0.5 + scale * 0.4 / 41
    # move 1: forced sqrt(2 * .3 * 52) = 5.59; its PUCT score 0.1 + scale * .3 / (1 + n) stays at most the
    # best's from n = 4.54 on: 5 visits, more than 8 - 5.59, so 5 are kept (3 taken back)
    need1 = np.ceil(scale * 0.3 / (best_score - 0.1) - 1)
    assert need1 == 5 and out[1] == 5
    # move 2 (a Q close to the best's): PUCT would have given it 5.54 visits, more than its 3: all kept
    assert np.ceil(scale * 0.1 / (best_score - 0.45) - 1) == 6 and out[2] == 3
    assert out[3] == 0 and out[4] == 0 and out[0] == 40  # a single visit is dropped; the best keeps all
    np.testing.assert_array_equal(pruned_visits(visits, q, prior, scale, forced_k=0.0), visits)


def test_forced_playouts_visit_every_move_and_leave_the_target_pruned():
    """mcts.forced_playouts: in a self-play search (root noise) every root
    move gets at least about sqrt(k P N) visits; the policy target is the
    pruned visits; a match search (no noise) is the plain PUCT one."""
    game = make_game("connect4")
    torch.manual_seed(0)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8))
    ev = NetworkEvaluator(game, net, "cpu", precision="fp32")
    root = game.initial_state()
    peaked = np.array([0.02, 0.02, 0.02, 0.88, 0.02, 0.02, 0.02], np.float32)

    def oracle(states):  # a confident prior, values from the untrained net
        return np.tile(peaked, (len(states), 1)), ev(states)[1]

    def run(k, noise):
        cfg = SearchConfig(simulations=200, forced_playouts=k, dirichlet_epsilon=0.0)
        mcts = BatchedMCTS(game, oracle, cfg, 1, rng=np.random.default_rng(0))
        mcts.set_root(0, root)
        return mcts.search([0], add_noise=noise), mcts

    plain, _ = run(0.0, True)
    forced, mcts = run(2.0, True)
    prior, total = forced.priors[0], forced.visits[0].sum()
    assert (forced.visits[0] >= np.floor(np.sqrt(2.0 * prior * total)) - 1).all()
    assert forced.visits[0].min() > plain.visits[0].min()  # the least likely move gets more visits
    from zeroloop.engine.search.tree import pruned_visits

    scale = 1.25 * np.sqrt(max(mcts.tree.node_n[mcts.slots.root[0]], 1.0))
    kept = pruned_visits(forced.visits[0], forced.q[0], prior, scale, 2.0)
    np.testing.assert_allclose(forced.policy[0], kept / kept.sum())
    assert not np.allclose(forced.policy[0], forced.visits[0] / total)  # pruning changed the target
    match, _ = run(2.0, False)
    np.testing.assert_array_equal(match.visits[0], run(0.0, False)[0].visits[0])
    # Gumbel's halving chooses its own root visits: forced playouts are PUCT's, Gumbel plays as without them
    game = make_game("tictactoe")
    seeds = [np.random.SeedSequence([9, k]) for k in range(3)]
    games = [[r.actions for r in play_selfplay_games(game, uniform_evaluator(game),
                                                     _gumbel(8, forced_playouts=k), SAMPLED_10, seeds)]
             for k in (0.0, 2.0)]
    assert games[0] == games[1]




def test_masked_priors_are_the_numpy_formula_bit_for_bit():
    """The kernel that keeps an evaluator's priors (masked, normalised in float32, a row with
    nothing on its legal moves uniform) gives the bits the NumPy formula it replaced gave, float64
    and NaN answers included: the searches, and so the games, are unchanged."""
    from zeroloop.engine.search import kernels as K
    from zeroloop.engine.search.tree import row_sums

    def numpy_formula(priors, masks):
        p = np.where(masks, priors, 0.0).astype(np.float32)
        total = row_sums(p)[:, None]
        uniform = masks / masks.sum(axis=1, keepdims=True)
        return np.where(total > 0, p / np.maximum(total, 1e-30), uniform).astype(np.float32)

    rng = np.random.default_rng(7)
    for dtype in (np.float32, np.float64):
        priors = rng.dirichlet(np.ones(7), size=400).astype(dtype) * rng.uniform(0, 3, (400, 1))
        priors[rng.random(priors.shape) < 0.2] = 0
        priors[5] = 0  # nothing anywhere: uniform
        priors[6, :3] = np.nan  # a broken answer: uniform as well
        priors[7] = 1e-39  # a subnormal sum
        masks = rng.random(priors.shape) < 0.7
        masks[:, 3] = True  # a legal move in every row
        masks[8] = False
        masks[8, 6] = True  # one legal move, whose prior is 0
        priors[8, 6] = 0
        got = K.masked_priors(np.ascontiguousarray(priors, dtype=np.float32), masks)
        with np.errstate(invalid="ignore", divide="ignore"):
            want = numpy_formula(priors, masks)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
