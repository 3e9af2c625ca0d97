"""Pons' Connect Four benchmark groups: moves left from a solver score, the
group boundaries, a grouped set that agrees with the solver, and per-group
error rates in the evaluation."""

from pathlib import Path

import numpy as np
import pytest

from zeroloop.engine.games import make_game
from zeroloop.engine.perfect import perfect_scorer
from zeroloop.engine.positions import (
    ILLEGAL,
    PONS_GROUP_NAMES,
    PositionSet,
    decisive,
    group_errors,
    make_connect4_benchmark,
    move_errors,
    moves_left,
    pons_group,
    position_keys,
)

C4 = make_game("connect4")


def _play(cols: str):
    """A position from Pons' notation (columns 1-7)."""
    s = C4.initial_state()
    for c in cols:
        s = C4.apply(s, int(c) - 1)
    return s


@pytest.mark.parametrize("cols, score, left", [
    ("4455", 18, 3),          # Pons: red wins with its 4th stone, at move 7
    ("44455554221", -15, 2),  # Pons: red (first) wins next move with its 7th stone, at move 13
    ("", 1, 41),              # the first player wins with its last stone, move 41
    ("", 0, 42),              # a draw fills the board
])
def test_moves_left_from_pons_scores(cols, score, left):
    s = _play(cols)
    assert moves_left(score, s.ply) == left


def test_moves_left_agrees_with_the_solver_on_pons_examples():
    scorer = perfect_scorer(C4)
    assert max(scorer(_play("4455")).values()) == 18
    assert max(scorer(_play("44455554221")).values()) == -15


@pytest.mark.parametrize("stones, left, group", [
    (0, 13, "begin-easy"), (14, 14, "begin-medium"), (14, 27, "begin-medium"), (10, 28, "begin-hard"),
    (15, 0, "middle-easy"), (28, 13, "middle-easy"), (15, 27, "middle-medium"), (29, 13, "end-easy"),
    (41, 1, "end-easy"),
])
def test_pons_group_boundaries(stones, left, group):
    assert pons_group(stones, left) == group


def test_a_position_outside_every_group_is_refused():
    with pytest.raises(ValueError, match="no Pons group has 30 stones and 14 moves left"):
        pons_group(30, 14)


def test_benchmark_has_each_group_filled_and_grouped_as_the_solver_says():
    scorer = perfect_scorer(C4)
    ps = make_connect4_benchmark(C4, 4, np.random.default_rng(0), scorer)
    assert ps.group_names() == list(PONS_GROUP_NAMES)
    assert [ps.groups.count(g) for g in PONS_GROUP_NAMES] == [4] * 6
    for seq, group, row in zip(ps.moves, ps.groups, ps.labels, strict=True):
        s = _play("".join(str(a + 1) for a in seq))
        assert s.outcome is None
        scores = scorer(s)
        assert pons_group(s.ply, moves_left(max(scores.values()), s.ply)) == group
        assert [row[a] for a in sorted(scores)] == [np.sign(scores[a]) for a in sorted(scores)]
    assert len({tuple(m) for m in ps.moves}) == 24
    again = PositionSet.from_json(ps.to_json())
    assert again.groups == ps.groups and np.array_equal(again.labels, ps.labels)


def test_the_solvers_value_places_draws_as_scoring_every_move_does():
    """The value of a position (one search) decides its group before its moves
    are scored: the same set, with far fewer positions scored move by move;
    a value that disagrees with the best move's score is refused."""
    from zeroloop.engine.perfect import perfect_value

    scorer = perfect_scorer(C4)
    value = perfect_value(scorer)
    assert value is not None and perfect_value(perfect_scorer(make_game("tictactoe"))) is None
    scored = []

    def counting(s):
        scored.append(s)
        return scorer(s)

    plain = make_connect4_benchmark(C4, 4, np.random.default_rng(3), scorer)
    placed = make_connect4_benchmark(C4, 4, np.random.default_rng(3), counting, value=value)
    assert placed.moves == plain.moves and placed.groups == plain.groups
    assert np.array_equal(placed.labels, plain.labels)
    assert len(scored) == len(plain.moves)  # only the kept draws were scored move by move
    def off_by_one(s):  # a scorer that disagrees with the value on late positions
        return {a: v + (s.ply > 30) for a, v in scorer(s).items()}

    with pytest.raises(RuntimeError, match="is not its best move's score"):
        make_connect4_benchmark(C4, 4, np.random.default_rng(3), off_by_one, value=value)


def test_group_errors_add_up_to_the_overall_rate():
    scorer = perfect_scorer(C4)
    ps = make_connect4_benchmark(C4, 5, np.random.default_rng(1), scorer)
    rng = np.random.default_rng(2)
    chosen = [int(rng.choice(np.flatnonzero(r != ILLEGAL))) for r in ps.labels]
    per = group_errors(ps, chosen)
    assert list(per) == list(PONS_GROUP_NAMES)
    assert sum(e.errors for e in per.values()) == move_errors(ps, chosen).errors
    best = [int(np.argmax(np.where(r != ILLEGAL, r, -9))) for r in ps.labels]
    assert all(e.errors == 0 for e in group_errors(ps, best).values())
    # a position where every move has the same result can hold no error
    matters = decisive(ps)
    worst = [int(np.argmin(np.where(r != ILLEGAL, r, 9))) for r in ps.labels]
    assert move_errors(ps, worst).errors == int(matters.sum())


def test_evaluation_reports_raw_and_searched_error_per_group(tmp_path):
    import torch

    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import save_model
    from zeroloop.pipeline.evaluation import positions_step, solver_errors
    from zeroloop.pipeline.params import parse_params

    p = parse_params({"game": "connect4", "evaluate": {"positions_per_group": 3, "simulations": 16},
                      "runtime": {"device": "cpu"}})
    layout = Layout(tmp_path)
    ps = positions_step(p, layout)
    assert layout.positions.is_file() and len(ps.moves) == 18
    # the test set has its own seed: another run seed is measured on the same positions
    other = positions_step(p.model_copy(update={"seed": 7}), Layout(tmp_path / "seed7"))
    assert other.moves == ps.moves
    moved = p.model_copy(update={"evaluate": p.evaluate.model_copy(update={"positions_seed": 1})})
    assert positions_step(moved, Layout(tmp_path / "pseed1")).moves != ps.moves
    torch.manual_seed(0)
    model = tmp_path / "m.pt"
    net = PolicyValueNet.for_game(C4, NetConfig(blocks=1, channels=8, value_hidden=8))
    save_model(model, net, C4, meta={})
    out = solver_errors(p, str(model), ps)
    assert list(out["groups"]) == list(PONS_GROUP_NAMES)
    assert out["positions"] == 18 and out["simulations"] == 16
    for kind in ("policy", "search"):
        per_group = [g[f"{kind}_error_rate"] * g["positions"] for g in out["groups"].values()]
        assert sum(per_group) / 18 == pytest.approx(out[f"{kind}_error_rate"], abs=1e-3)
    assert sum(g["decisive"] for g in out["groups"].values()) == out["decisive"] == int(decisive(ps).sum())


@pytest.mark.parametrize("game_name,per_group,groups", [("connect4", 4, 6), ("tictactoe", 40, 1)])
def test_held_out_test_set_never_repeats_a_validation_position(tmp_path, game_name, per_group, groups):
    """The test set (its own count and seed) shares no position with the
    validation set, even where both are drawn from the same few opening plies
    (begin-easy) or from a game as small as tic-tac-toe; it depends on its
    seed, not on the run's."""
    from zeroloop.engine.games import make_game
    from zeroloop.engine.positions import position_keys
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.evaluation import positions_step
    from zeroloop.pipeline.params import parse_params

    game = make_game(game_name)
    ev = {"positions_per_group": per_group, "test_positions_per_group": per_group,
          "positions_seed": 5, "test_positions_seed": 5}  # one seed for both: only the exclusion parts them
    p = parse_params({"game": game_name, "evaluate": ev})
    layout = Layout(tmp_path)
    val = positions_step(p, layout)
    test = positions_step(p, layout, test=True)
    assert layout.test_positions.is_file() and len(test.moves) == len(val.moves) == per_group * groups
    assert not position_keys(game, val) & position_keys(game, test)
    assert len(position_keys(game, test)) == len(test.moves)  # distinct
    again = positions_step(p.model_copy(update={"seed": 9}), Layout(tmp_path / "b"), test=False)
    assert again.moves == val.moves
    reseeded = positions_step(p.model_copy(update={"seed": 9}), Layout(tmp_path / "b"), test=True)
    assert reseeded.moves == test.moves
    none = p.evaluate.model_copy(update={"test_positions_per_group": 0})
    off = positions_step(p.model_copy(update={"evaluate": none}), Layout(tmp_path / "c"), test=True)
    assert off.moves == [] and "disabled" in (tmp_path / "c" / "data" / "test_positions.json").read_text()


def test_wilson_interval_by_hand():
    from zeroloop.engine.positions import ErrorRate

    lo, hi = ErrorRate(10, 100).interval()
    assert (lo, hi) == pytest.approx((0.0552, 0.1744), abs=1e-4)  # the textbook Wilson interval of 10/100
    assert ErrorRate(0, 50).interval()[0] == 0.0 and ErrorRate(0, 50).interval()[1] > 0.05
    assert ErrorRate(0, 0).interval() == (0.0, 1.0)


def test_paired_errors_by_hand():
    from zeroloop.engine.positions import paired_errors

    v = paired_errors([1, 1, 1, 0, 0], [0, 0, 1, 1, 0])
    assert (v["only_first"], v["only_second"], v["positions"]) == (2, 1, 5)
    assert v["difference"] == pytest.approx(-0.2)
    assert v["mcnemar_p"] == 1.0  # 2 x P(X <= 1), X ~ Bin(3, 1/2) = 2 x 4/8, capped at 1
    six = paired_errors([1] * 6 + [0] * 14, [0] * 20)
    assert six["mcnemar_p"] == pytest.approx(0.0312, abs=1e-4)  # 2 x (1/2)^6
    lo, hi = six["difference_ci95"]
    assert lo < six["difference"] == -0.3 < hi < 0  # six fewer errors in 20: the interval excludes 0
    same = paired_errors([1, 0, 1], [1, 0, 1])
    assert (same["difference"], same["mcnemar_p"]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="equal-length"):
        paired_errors([1, 0], [1])


def test_errors_pools_baseline_arm_pairs_as_the_rounds_do(tmp_path, capsys):
    """``zeroloop errors --pairs A1 B1 A2 B2``: each arm against its own
    baseline, then one comparison of every position once a pair. With the
    pairs (m1, m2) and (m2, m1) the pooled counts are each pair's summed,
    overall and per group, and the two directions cancel to a difference of
    exactly 0; an odd number of models is refused before anything is read."""
    import json

    import torch

    from zeroloop.apps.errors import measure
    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline import evaluation
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import save_model
    from zeroloop.pipeline.params import parse_params

    settings = {"game": "connect4", "runtime": {"device": "cpu", "workers": 1},
                "evaluate": {"positions_per_group": 1, "test_positions_per_group": 2, "simulations": 8}}
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(settings))  # YAML reads JSON
    for test in (False, True):  # the test set leaves out the validation set's positions
        evaluation.positions_step(parse_params(settings), Layout(tmp_path), test=test, shipped=False)
    for seed in (1, 2):
        torch.manual_seed(seed)
        save_model(tmp_path / f"m{seed}.pt",
                   PolicyValueNet.for_game(C4, NetConfig(blocks=1, channels=8, value_hidden=8)), C4, meta={})
    m1, m2 = str(tmp_path / "m1.pt"), str(tmp_path / "m2.pt")
    assert measure([m1, m2, m2, m1], "test", str(params), str(tmp_path), None, True, pairs=True) == 0
    paired = [json.loads(line)["paired"] for line in capsys.readouterr().out.splitlines() if "paired" in line]
    assert [(x["first"], x["second"]) for x in paired] == [(m1, m2), (m2, m1), ([m1, m2], [m2, m1])]
    one, two, pooled = paired
    assert pooled["pairs"] == 2 and "pairs" not in one
    assert set(pooled) - {"first", "second", "set", "pairs"} == set(one) - {"first", "second", "set"}
    assert len(one) - 3 == 1 + 6  # overall and Pons' six groups
    for group in set(one) - {"first", "second", "set"}:
        for kind in ("search", "raw_policy"):
            a, b, v = one[group][kind], two[group][kind], pooled[group][kind]
            assert v["positions"] == a["positions"] + b["positions"] == 2 * a["positions"]
            assert v["only_first"] == a["only_first"] + b["only_first"] == v["only_second"]
            assert (a["only_first"], a["only_second"]) == (b["only_second"], b["only_first"])
            assert v["difference"] == 0.0
    assert any(one["overall"][k]["only_first"] + one["overall"][k]["only_second"]
               for k in ("search", "raw_policy"))  # the two nets differ somewhere: the sums are not 0 = 0
    with pytest.raises(ValueError, match="--pairs takes baseline/arm pairs .*got 3 models"):
        measure([m1, m2, m1], "test", str(params), str(tmp_path), None, True, pairs=True)


def test_measuring_over_workers_gives_the_moves_of_one_process(tmp_path, monkeypatch):
    """Positions are searched in fixed tasks of MEASURE_CHUNK, so two worker
    processes measure exactly the moves one process does."""
    import torch

    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline import evaluation
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import save_model
    from zeroloop.pipeline.params import parse_params

    monkeypatch.setattr(evaluation, "MEASURE_CHUNK", 7)
    p = parse_params({"game": "connect4", "evaluate": {"positions_per_group": 3, "simulations": 16},
                      "runtime": {"device": "cpu"}})
    ps = evaluation.positions_step(p, Layout(tmp_path))
    torch.manual_seed(1)
    model = tmp_path / "m.pt"
    save_model(model, PolicyValueNet.for_game(C4, NetConfig(blocks=1, channels=8, value_hidden=8)), C4,
               meta={})
    states = ps.states(C4)
    one = evaluation.policy_and_search_moves(p, str(model), states, workers=1)
    two = evaluation.policy_and_search_moves(p, str(model), states, workers=2)
    assert len(one[1]) == len(states) == 18
    assert one[0].tolist() == two[0].tolist() and one[1] == two[1]


def test_a_model_replaced_while_it_is_measured_is_measured_as_it_was(tmp_path, monkeypatch):
    """Each task opens the model file; the measurement reads the file once
    and hands the tasks a private copy, so a file replaced after the first
    task is still measured whole as the network it held at the start (it
    was measured as a mix of two networks), and the copy is gone after.
    A damaged file fails before any task, naming the file."""
    import torch

    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline import evaluation
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import DamagedFileError, save_model
    from zeroloop.pipeline.params import parse_params

    monkeypatch.setattr(evaluation, "MEASURE_CHUNK", 7)
    p = parse_params({"game": "connect4", "evaluate": {"positions_per_group": 3, "simulations": 8},
                      "runtime": {"device": "cpu"}})
    states = evaluation.positions_step(p, Layout(tmp_path)).states(C4)
    models = {}
    for seed in (1, 2):
        torch.manual_seed(seed)
        models[seed] = tmp_path / f"m{seed}.pt"
        save_model(models[seed], PolicyValueNet.for_game(C4, NetConfig(blocks=1, channels=8, value_hidden=8)),
                   C4, meta={})
    clean = {k: evaluation.policy_and_search_moves(p, str(m), states, workers=1) for k, m in models.items()}
    assert clean[1][0][7:].tolist() != clean[2][0][7:].tolist()  # the later tasks would tell the two apart
    read, measure = [], evaluation._moves_here

    def replacing(p, path, task_states):
        read.append(path)
        out = measure(p, path, task_states)
        if len(read) == 1:  # replaced after the first task
            models[1].write_bytes(models[2].read_bytes())
        return out

    monkeypatch.setattr(evaluation, "_moves_here", replacing)
    mixed = evaluation.policy_and_search_moves(p, str(models[1]), states, workers=1)
    assert len(read) == 3
    assert mixed[0].tolist() == clean[1][0].tolist() and mixed[1] == clean[1][1]
    assert str(models[1]) not in read
    assert not any(Path(r).exists() for r in read)
    bad = tmp_path / "bad.pt"
    bad.write_bytes(models[2].read_bytes()[:-10])
    with pytest.raises(DamagedFileError, match="bad.pt: truncated"):
        evaluation.policy_and_search_moves(p, str(bad), states, workers=1)


@pytest.mark.parametrize("test_set", [False, True])
def test_shipped_labelled_sets_agree_with_the_solver(test_set):
    """The default sets a fresh clone copies instead of labelling: a sample of
    each group's positions labelled and grouped again by the solver, the test
    set apart from the validation set, and copied only for the params that
    would have drawn it."""
    from zeroloop.pipeline.evaluation import set_digest, shipped_positions

    scorer = perfect_scorer(C4)
    val = shipped_positions("connect4", test=False, per_group=100, seed=0)
    ps = shipped_positions("connect4", test=True, per_group=300, seed=1, validation=val) if test_set else val
    n = 300 if test_set else 100
    assert [ps.groups.count(g) for g in PONS_GROUP_NAMES] == [n] * 6
    assert len({tuple(m) for m in ps.moves}) == 6 * n
    rng = np.random.default_rng(5)
    for g in PONS_GROUP_NAMES:
        rows = [i for i, name in enumerate(ps.groups) if name == g]
        for i in rng.choice(rows, 3, replace=False):
            s = _play("".join(str(a + 1) for a in ps.moves[i]))
            scores = scorer(s)
            assert pons_group(s.ply, moves_left(max(scores.values()), s.ply)) == g
            assert [ps.labels[i][a] for a in sorted(scores)] == [np.sign(scores[a]) for a in sorted(scores)]
    if test_set:
        assert not position_keys(C4, ps) & position_keys(C4, val)
        other = PositionSet(val.game, val.moves[1:], val.labels[1:], val.groups[1:])
        assert set_digest(other) != set_digest(val)
        assert shipped_positions("connect4", test=True, per_group=300, seed=1, validation=other) is None
    assert shipped_positions("connect4", test=test_set, per_group=n, seed=7, validation=val) is None


@pytest.mark.slow
def test_shipped_validation_set_is_what_positions_step_labels(tmp_path):
    """Labelled from nothing with today's code, the default validation set is
    its shipped copy byte for byte (9 CPU-s on an Intel Xeon). The test set,
    three times the size, is drawn by the same code and was checked the same
    way when it was shipped and when the labelling last changed."""
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.evaluation import positions_step
    from zeroloop.pipeline.params import parse_params

    p = parse_params({"game": "connect4"})
    fresh, copied = Layout(tmp_path / "fresh"), Layout(tmp_path / "copied")
    positions_step(p, fresh, shipped=False)
    positions_step(p, copied)
    assert fresh.positions.read_bytes() == copied.positions.read_bytes()
