"""The exact Othello endgame solver against brute force, and the endgame
position sets it labels for evaluation."""

import numpy as np
import pytest

from zeroloop.engine.games import make_game, random_line
from zeroloop.engine.othello_endgame import OthelloEndgame


def _brute_diff(game, s) -> int:
    """Final disc difference for the side to move, by full minimax over the game's own rules."""
    if s.outcome is not None:
        return s.me.bit_count() - s.opp.bit_count()
    return max(-_brute_diff(game, game.apply(s, int(a))) for a in np.flatnonzero(game.legal_mask(s)))


def _endgames(game, count, most, seed, least=1):
    rng = np.random.default_rng(seed)
    cells, out = game.rows * game.cols, []
    while len(out) < count:
        s, _ = random_line(game, int(rng.integers(cells - 4 - most, game.max_moves)), rng)
        if s.outcome is None and least <= cells - (s.me | s.opp).bit_count() <= most:
            out.append(s)
    return out


@pytest.mark.parametrize("name,count,most", [("othello-6x6", 40, 7), ("othello", 12, 6)])
def test_solver_agrees_with_brute_force(name, count, most):
    game = make_game(name)
    solver = OthelloEndgame(game)
    for s in _endgames(game, count, most, seed=3):
        me, opp = solver.compact(s.me), solver.compact(s.opp)
        assert solver.value(me, opp) == _brute_diff(game, s)  # the exact disc difference
        want = {int(a): int(np.sign(-_brute_diff(game, game.apply(s, int(a)))))
                for a in np.flatnonzero(game.legal_mask(s))}
        assert solver.scores(s) == want


def test_a_forced_pass_is_labelled_like_any_move():
    game = make_game("othello-6x6")
    solver = OthelloEndgame(game)
    rng = np.random.default_rng(0)
    found = 0
    for _ in range(20000):
        s, _ = random_line(game, int(rng.integers(24, game.max_moves)), rng)
        legal = np.flatnonzero(game.legal_mask(s))
        empties = 36 - (s.me | s.opp).bit_count()
        if s.outcome is None and legal.tolist() == [game.pass_action] and empties <= 8:
            after = game.apply(s, game.pass_action)
            assert solver.scores(s) == {game.pass_action: int(np.sign(-_brute_diff(game, after)))}
            found += 1
            if found == 5:
                break
    assert found == 5


def test_solver_refuses_what_it_cannot_solve():
    game = make_game("othello-6x6")
    solver = OthelloEndgame(game, max_empties=10)
    with pytest.raises(ValueError, match="32 empty squares: the endgame solver takes at most 10"):
        solver.scores(game.initial_state())
    with pytest.raises(ValueError, match="cannot solve connect4"):
        OthelloEndgame(make_game("connect4"))


def test_endgame_sets_are_grouped_decisive_and_distinct(tmp_path):
    from zeroloop.engine.positions import OTHELLO_GROUPS, decisive, position_keys
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.evaluation import positions_step
    from zeroloop.pipeline.params import parse_params

    game = make_game("othello-6x6")
    ev = {"positions_per_group": 6, "test_positions_per_group": 6,
          "positions_seed": 2, "test_positions_seed": 2}
    p = parse_params({"game": "othello-6x6", "evaluate": ev})
    layout = Layout(tmp_path)
    val, test = positions_step(p, layout), positions_step(p, layout, test=True)
    assert val.group_names() == [g for g, _, _ in OTHELLO_GROUPS] and len(val.moves) == 12
    assert decisive(val).all() and decisive(test).all()
    assert not position_keys(game, val) & position_keys(game, test)
    bounds = {g: (lo, hi) for g, lo, hi in OTHELLO_GROUPS}
    cells = game.rows * game.cols
    for ps in (val, test):
        for s, g in zip(ps.states(game), ps.groups, strict=True):
            lo, hi = bounds[g]
            assert lo <= cells - (s.me | s.opp).bit_count() <= hi


def test_othello_evaluation_reports_errors_per_group(tmp_path):
    import torch

    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import save_model
    from zeroloop.pipeline.evaluation import positions_step, solver_errors
    from zeroloop.pipeline.params import parse_params

    game = make_game("othello-6x6")
    p = parse_params({"game": "othello-6x6", "evaluate": {"positions_per_group": 5, "simulations": 8},
                      "runtime": {"device": "cpu"}})
    ps = positions_step(p, Layout(tmp_path))
    torch.manual_seed(0)
    model = tmp_path / "m.pt"
    save_model(model, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)
    out = solver_errors(p, str(model), ps)
    assert list(out["groups"]) == ["empties-1-7", "empties-8-14"] and out["positions"] == 10
    assert out["decisive"] == 10 and 0 <= out["search_error_rate"] <= 1


def test_the_transposition_table_changes_no_value():
    """At 10-14 empty squares, where brute force is out of reach: the same
    exact values and null-window bounds with and without the table, and the
    table saves nodes."""
    game = make_game("othello-6x6")
    plain, tabled = OthelloEndgame(game, table_from=99), OthelloEndgame(game)
    for s in _endgames(game, 10, 14, seed=5, least=10):
        me, opp = plain.compact(s.me), plain.compact(s.opp)
        exact = plain.value(me, opp)
        assert tabled.value(me, opp) == exact
        for lo, hi in ((-1, 1), (exact - 1, exact + 1), (exact, exact + 2), (exact - 2, exact)):
            v = tabled.value(me, opp, lo, hi)
            # fail-soft: exact inside the window, else a bound on the right side
            assert (v == exact) if lo < exact < hi else (v >= hi and exact >= hi) or (v <= lo and exact <= v)
        assert tabled.scores(s) == plain.scores(s)
    assert 0 < tabled.nodes[0] < plain.nodes[0]
