"""The generation steps' training choices: the network training continues, dedup, the options."""


import pytest

from zeroloop.pipeline.data.layout import Layout
from zeroloop.pipeline.data.storage import load_model
from zeroloop.pipeline.evaluation import evaluate_step, positions_step
from zeroloop.pipeline.generation import gate_step, init_step, selfplay_step, train_step
from zeroloop.pipeline.params import parse_params


def _params(**changes):
    return parse_params({"game": "tictactoe", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                         "mcts": {"simulations": 4}, "selfplay": {"games": 4, "shard_games": 2},
                         "train": {"epochs": 1, "batch_size": 8},
                         "generations": {"1": {"prev": 0}, "2": {"prev": 1}},
                         "runtime": {"workers": 1, "device": "cpu"}, **changes})


def test_training_after_a_rejected_gate_continues_from_the_best_network(tmp_path):
    p = _params()
    layout = Layout(tmp_path)
    init_step(p, layout)
    assert layout.model(0, "candidate").read_bytes() == layout.model(0).read_bytes()
    for gen in (1, 2):
        selfplay_step(p, layout, gen, gen - 1, progress=False)
        summary = train_step(p, layout, gen, gen - 1, progress=False)
        if gen == 1:
            # the gate rejected generation 1's candidate: its best is generation 0's model
            layout.model(1).write_bytes(layout.model(0).read_bytes())
            assert summary["trained_from"] == 0
    assert summary["trained_from"] == 0
    _, _, meta = load_model(layout.model(2, "candidate"))
    assert meta["trained_from"] == summary["trained_from"]


def test_training_with_dedup_trains_on_each_distinct_position_once(tmp_path):
    from zeroloop.pipeline.generation import checked_shards, replay_window
    from zeroloop.pipeline.training.replay import load_replay

    p = _params(train={"epochs": 1, "batch_size": 8, "dedup": True})
    layout = Layout(tmp_path)
    init_step(p, layout)
    selfplay_step(p, layout, 1, 0, progress=False)
    summary = train_step(p, layout, 1, 0, progress=False)
    data = load_replay(p.make_game(), checked_shards(replay_window(p, layout, 1, 0)))
    distinct = {row.tobytes() for row in data.planes}
    # four tic-tac-toe games all start from the empty board: the window repeats positions
    assert summary["samples"] == len(distinct) < summary["positions_played"] == len(data)


def test_a_generation_with_every_learning_option_on(tmp_path):
    """Gumbel search, a playout cap, random opening plies, a mixed value target, an EMA of the
    weights and AdamW without decay on BatchNorm run through every step (a smoke test:
    each option's effect is tested in test_learning_options.py, test_search.py,
    test_training.py and above)."""
    p = _params(mcts={"simulations": 8, "algorithm": "gumbel", "reuse_tree": False, "forced_playouts": 0.0,
                      "max_considered_actions": 4},
                selfplay={"games": 8, "shard_games": 4, "full_search_probability": 0.5,
                          "fast_simulations": 2},
                train={"epochs": 1, "batch_size": 8, "ema_decay": 0.9, "optimizer": "adamw", "dedup": False,
                       "weight_decay": 0.01, "decay_norm_and_bias": False, "value_q_weight": 0.5},
                gate={"games": 4, "simulations": 8, "opening_plies": 1},
                evaluate={"games": 2, "simulations": 8, "opening_plies": 1, "uct_playouts": 5,
                          "positions_per_group": 5})
    layout = Layout(tmp_path)
    init_step(p, layout)
    positions_step(p, layout)
    summary, _ = selfplay_step(p, layout, 1, 0, progress=False)
    assert 0 < summary["training_positions"] < summary["positions"]
    train = train_step(p, layout, 1, 0, progress=False)
    assert train["samples"] == summary["training_positions"]
    gate, _ = gate_step(p, layout, 1, 0, progress=False)
    assert gate["games"] == 4 and "pair_ci95_low" in gate and gate["simulations"] == 8
    result = evaluate_step(p, layout, 1, progress=False)
    assert result["solver"]["positions"] == 5 and result["simulations"] == 8


def test_archive_starts_begin_the_games_in_the_previous_generations_games(tmp_path):
    """selfplay.archive_starts 1: generation 1 has no earlier games and starts
    from the empty board; every game of generation 2 starts from a position of
    generation 1's games, whose moves it replays untrained."""
    from zeroloop.engine.selfplay import arrays_to_records
    from zeroloop.pipeline.data.shards import read_manifest
    from zeroloop.pipeline.data.storage import load_shard

    p = _params(selfplay={"games": 8, "shard_games": 4, "archive_starts": 1.0})
    layout = Layout(tmp_path)
    init_step(p, layout)

    def games(gen):
        shards = sorted(layout.data(gen).glob("shard_*"))
        return [r for path in shards for r in arrays_to_records(load_shard(path)[0])]
    for gen in (1, 2):
        selfplay_step(p, layout, gen, gen - 1, progress=False)
        train_step(p, layout, gen, gen - 1, progress=False)
        layout.model(gen).write_bytes(layout.model(gen, "candidate").read_bytes())  # as an accepting gate
    first, second = games(1), games(2)
    assert all(r.full.all() for r in first)
    archive = [tuple(r.actions) for r in first]
    starts = [int(r.full.argmax()) for r in second]  # the replayed moves come first
    for r, k in zip(second, starts):
        assert r.full[k:].all() and any(a[:k] == tuple(r.actions[:k]) and len(a) > k for a in archive)
    assert max(starts) >= 2  # some start deep in generation 1's games
    assert "archive_sha256" in read_manifest(layout.data(2) / "manifest.json")["identity"]


def test_an_othello_generation_is_measured_against_perfect_play(tmp_path):
    """Othello 6x6 end to end through the generation steps: its endgame
    positions, labelled by the exact solver, give each generation a move
    error per group, as Connect Four's Pons positions do (and the candidate
    comes from the weight average, train.ema_decay)."""
    p = parse_params({"game": "othello-6x6", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                      "mcts": {"simulations": 4}, "selfplay": {"games": 4, "shard_games": 2},
                      "train": {"epochs": 1, "batch_size": 8, "ema_decay": 0.9},
                      "gate": {"games": 2, "simulations": 4},
                      "evaluate": {"games": 2, "simulations": 4, "uct_playouts": 5, "positions_per_group": 4},
                      "generations": {"1": {"prev": 0}}, "runtime": {"workers": 1, "device": "cpu"}})
    layout = Layout(tmp_path)
    init_step(p, layout)
    positions_step(p, layout)
    selfplay_step(p, layout, 1, 0, progress=False)
    train_step(p, layout, 1, 0, progress=False)
    gate_step(p, layout, 1, 0, progress=False)
    result = evaluate_step(p, layout, 1, progress=False)
    solver = result["solver"]
    assert solver["positions"] == 8 and list(solver["groups"]) == ["empties-1-7", "empties-8-14"]
    assert all(0 <= g["search_error_rate"] <= 1 for g in solver["groups"].values())


@pytest.mark.parametrize("game", ["go-5", "gomoku"])
def test_a_generation_without_a_perfect_player_runs_through_every_step(tmp_path, game):
    """Go 5x5 and gomoku through init, self-play, training, the gate and the
    evaluation (against random play and rollout UCT): no perfect player, so
    an empty position set, which the evaluation must read back."""
    p = parse_params({"game": game, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                      "mcts": {"simulations": 4}, "selfplay": {"games": 4, "shard_games": 2},
                      "train": {"epochs": 1, "batch_size": 8},
                      "gate": {"games": 2, "simulations": 4},
                      "evaluate": {"games": 2, "simulations": 4, "uct_playouts": 5},
                      "generations": {"1": {"prev": 0}}, "runtime": {"workers": 1, "device": "cpu"}})
    layout = Layout(tmp_path)
    init_step(p, layout)
    assert positions_step(p, layout).moves == []  # no perfect player: an empty set with its note
    summary, _ = selfplay_step(p, layout, 1, 0, progress=False)
    assert summary["positions"] > 0
    train_step(p, layout, 1, 0, progress=False)
    gate, _ = gate_step(p, layout, 1, 0, progress=False)
    result = evaluate_step(p, layout, 1, progress=False)
    assert gate["games"] == 2 and "solver" not in result
    assert {"vs_random", "vs_uct"} <= set(result)


@pytest.mark.slow
def test_the_evaluation_in_one_pool_plays_the_games_and_moves_of_separate_matches(tmp_path, monkeypatch):
    """evaluate_step runs every baseline match and the positions in one pool
    of two workers, the slow tasks first; its scores and move errors are
    those of play_match per baseline and the positions measured alone."""
    import torch

    from zeroloop.engine.nn import PolicyValueNet
    from zeroloop.pipeline import evaluation
    from zeroloop.pipeline.data.layout import derive_seed
    from zeroloop.pipeline.data.storage import save_model
    from zeroloop.pipeline.matches import model_player, play_match

    monkeypatch.setattr(evaluation, "MEASURE_CHUNK", 4)
    p = parse_params({"game": "connect4", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                      "evaluate": {"games": 6, "simulations": 8, "opening_plies": 2, "uct_playouts": 20,
                                   "positions_per_group": 2},
                      "generations": {"1": {"prev": 0}}, "runtime": {"workers": 2, "device": "cpu"}})
    layout = Layout(tmp_path)
    init_step(p, layout)
    game = p.make_game()
    torch.manual_seed(1)  # generation 1: another net than generation 0's
    save_model(layout.model(1), PolicyValueNet.for_game(game, p.net.config()), game,
               meta={"generation": 1, "origin": 1})
    ps = positions_step(p, layout)
    result = evaluate_step(p, layout, 1, progress=False)
    me = model_player(p, str(layout.model(1)), "gen1", p.evaluate)
    previous = model_player(p, str(layout.model(0)), "gen0", p.evaluate)
    assert result["vs_previous"]["opponent"] == "gen0"
    for k, opp in enumerate([*evaluation.baselines(p, True), previous]):
        m = play_match(game, me, opp, games=6, opening_plies=2, seed=derive_seed(p.seed, "evaluate", 1) + k,
                       workers=2, progress=False)
        key = {"uct": "uct", "mcts": "previous"}.get(opp.kind, opp.name)
        assert (result[f"vs_{key}"]["wins"], result[f"vs_{key}"]["draws"]) == (m.score.wins, m.score.draws)
    alone = evaluation.solver_errors(p, str(layout.model(1)), ps)
    assert result["solver"] == alone and alone["positions"] == 12


def test_a_generation_whose_gate_kept_the_best_points_at_its_evaluation(tmp_path):
    """When the gate keeps generation 1's best at generation 2 (the same bytes),
    evaluate@2 plays nothing and points at evaluate@1; the report shows generation
    1's results at both and counts their games once."""
    from zeroloop.pipeline import report
    from zeroloop.pipeline.data.storage import write_json

    p = _params(evaluate={"games": 2, "simulations": 4, "uct_playouts": 5})
    layout = Layout(tmp_path)
    init_step(p, layout)
    positions_step(p, layout)
    selfplay_step(p, layout, 1, 0, progress=False)
    train_step(p, layout, 1, 0, progress=False)
    layout.model(1).write_bytes(layout.model(1, "candidate").read_bytes())  # accepted, as gate_step copies
    layout.model(2).parent.mkdir(parents=True)
    layout.model(2).write_bytes(layout.model(1).read_bytes())  # generation 2's gate kept it
    first = evaluate_step(p, layout, 1, progress=False)
    second = evaluate_step(p, layout, 2, progress=False)
    assert {"vs_random", "vs_uct"} <= set(first) and "same_as" not in first
    assert second["same_as"] == 1 and second["model"] == "gen1" and "vs_random" not in second
    for g in (1, 2):
        for name in ("selfplay", "train"):
            write_json(layout.report(g, name), {"mean_length": 5.0})
        write_json(layout.report(g, "gate"), {"generation": g, "candidate": f"gen{g}",
                                              "opponent": f"gen{g - 1}", "wins": 1, "draws": 0, "losses": 1})
    rows = report.collect(p, layout)
    shown = rows[1]["eval"]
    assert shown["vs_random"] == first["vs_random"] and shown["vs_uct"] == first["vs_uct"]
    assert shown["generation"] == 2 and shown["stage_cpu_s"] == second["stage_cpu_s"]
    evals, _ = report.match_results(p, rows)
    played = [report.player(v["opponent"], 4) if k == "vs_previous" else v["opponent"]
              for k, v in first.items() if isinstance(v, dict) and "opponent" in v]
    assert [e[1] for e in evals] == played and "uct5" in played  # generation 1's matches, once
    # and the previous best (generation 0's net), rated as the player its own evaluation would be
    assert first["vs_previous"]["opponent"] == "gen0" and "gen0@4" in played
    assert sum(first["vs_previous"][k] for k in ("wins", "draws", "losses")) == 2
    layout.report(1, "eval").unlink()
    with pytest.raises(FileNotFoundError, match="gen_1/eval.json"):
        report.collect(p, layout)
