"""The report step: the reference curve, GnuGo's levels in the table, the
anchor of the Elo scale, the plots and the time split."""

from zeroloop.pipeline import plots, report
from zeroloop.pipeline.params import parse_params


def test_the_reference_curve_is_drawn_only_for_runs_measured_like_it(tmp_path):
    """Connect Four measured on the shipped run's validation set and budget gets
    the default run's curve in errors.png; another set or budget does not."""
    import csv

    import numpy as np
    from PIL import Image

    like = {"game": "connect4", "evaluate": {"simulations": 200}}  # params.yaml's budget, the schema's is 100
    ref = report.reference_curve(parse_params(like))
    assert ref and [r["generation"] for r in ref] == list(range(1, len(ref) + 1))
    assert all(0 <= r["solver_error"] <= 1 and r["training_minutes"] > 0 for r in ref)
    other_set = {"game": "connect4", "evaluate": {"simulations": 200, "positions_seed": 3}}
    assert report.reference_curve(parse_params(other_set)) is None
    other_budget = {"game": "connect4", "evaluate": {"simulations": 100}}
    assert report.reference_curve(parse_params(other_budget)) is None
    assert report.reference_curve(parse_params({"game": "tictactoe"})) is None

    with open(report.REFERENCE_DIR / "connect4.csv", newline="") as f:
        rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)][:2]
    minutes = [r["training_minutes"] for r in rows]

    def grey_pixels(reference):
        path = plots.error_plot(rows, "connect4", minutes, tmp_path / "errors.png", reference)
        img = np.asarray(Image.open(path).convert("RGB")).astype(int)
        r, g, b = img[..., 0], img[..., 1], img[..., 2]
        return int(((abs(r - 128) < 4) & (r == g) & (g == b)).sum())  # matplotlib's "grey" is (128,128,128)

    assert grey_pixels(ref) > grey_pixels(None) + 200


def test_the_report_carries_each_gnugo_level_into_its_table_and_plot(tmp_path):
    """Go: every ``vs_gnugo<level>`` of eval.json becomes a column of the
    per-generation table, a line of scores.png, and GnuGo a rated player."""
    from zeroloop.engine.rating import fit_league

    def result(opponent, wins, losses):
        return {"opponent": opponent, "score": wins / (wins + losses), "wins": wins, "draws": 0,
                "losses": losses}

    p = parse_params({"game": "go-7", "evaluate": {"uct_playouts": 20, "gnugo_level": [1, 10]}})
    rows = []
    for g, (w1, w10) in enumerate(((2, 0), (6, 1)), start=1):
        ev = {"model": f"gen{g}", "simulations": 64, "vs_random": result("random", 10, 0),
              "vs_uct": result("uct20", 8, 2), "vs_gnugo1": result("gnugo1", w1, 10 - w1),
              "vs_gnugo10": result("gnugo10", w10, 10 - w10)}
        gate = {"generation": g, "candidate": f"gen{g}", "opponent": f"gen{g - 1}", "simulations": 64,
                "wins": 12, "draws": 0, "losses": 8, "score": 0.6, "accepted": True}
        rows.append({"eval": ev, "gate": gate, "train": {"train_loss": 1.0}, "selfplay": {"mean_length": 30}})
    evals, gates = report.match_results(p, rows)
    elo, gate_elo = fit_league(evals, anchor="uct20"), fit_league(gates, anchor="gen0@64")
    table = report.table(p, rows, elo, gate_elo)
    assert [(r["vs_gnugo1"], r["vs_gnugo10"]) for r in table] == [(0.2, 0.0), (0.6, 0.1)]
    assert "gnugo1" in elo and "gnugo10" in elo
    # the anchor the games inform best: GnuGo level 1 (8 of 20 points) over UCT (16 of 20) and level 10 (1)
    assert report.anchor_of(p, evals) == "gnugo1"
    assert report.anchor_of(p, [e for e in evals if not e[1].startswith("gnugo")]) == "uct20"
    swept = [(a, b, w + d + lo, 0, 0) for a, b, w, d, lo in evals]  # every game won: nothing informs
    assert report.anchor_of(p, swept) == "uct20"
    assert elo.rating("gnugo10")[0] > elo.rating("gnugo1")[0]  # it beat the models more often
    for row in table:  # the loss columns the plot draws
        row.update(value_loss=0.5, policy_loss=0.5)
    paths = plots.draw_plots(table, "go-7", "uct20", tmp_path)
    assert (tmp_path / "scores.png").stat().st_size > 0 and tmp_path / "scores.png" in paths


def test_the_reports_time_split_sums_each_kind_of_stage_and_leaves_out_what_was_not_recorded():
    rows = [{"selfplay": {"stage_wall_s": 100.0}, "train": {"stage_wall_s": 60.0},
             "gate": {"stage_wall_s": 10.0}, "eval": {"stage_wall_s": 25.0, "wall_s": 20.0}},
            {"selfplay": {"stage_wall_s": 110.0}, "train": {"stage_wall_s": 80.0},
             "gate": {"stage_wall_s": 12.0}, "eval": {"stage_wall_s": 23.0}}]
    split = report.time_split(rows, {"wall_s": 40.0})
    assert split == {"selfplay": 210.0, "train": 140.0, "gate": 22.0, "eval": 48.0, "test": 40.0}
    line = report.split_line(split)
    assert line.startswith("time by stage: self-play 210 s (46%), training 140 s (30%), gate 22 s (5%), "
                           "evaluation 48 s (10%), the champion's test 40 s (9%); 7.7 min in all")
    # an evaluation from before the stages recorded their process time: left out, not guessed
    del rows[0]["eval"]["stage_wall_s"]
    assert "eval" not in report.time_split(rows) and report.split_line({}) == "time by stage: not recorded"


def test_a_champion_that_won_every_game_against_the_anchor_gets_no_rating_as_if_measured():
    """30 of 30 against the anchor bounds no Elo: the fit's number is then its prior's (a run
    printed "Elo 1425 ± 3549"), so the report says what the games measured instead; a rating
    the games bound keeps the number and its interval."""
    assert report.elo_text(382.4, 61.2, "uct1000", None, 0.97) == "Elo 382 ± 120 (uct1000 = 0)"
    assert report.elo_text(10.0, 5.0, "gnugo1") == "Elo 10 ± 10 (gnugo1 = 0)"
    won = report.elo_text(1425.2, 1810.0, "uct1000", "above", 1.0)
    assert won.startswith("Elo above what its games measure (100% against uct1000, the anchor")
    assert "1425 ± 3548" in won and "prior" in won
    assert report.elo_text(-900.0, 1500.0, "gnugo1", "below", 0.0).startswith(
        "Elo below what its games measure (0%")


def test_the_games_against_the_previous_best_rate_a_champion_that_sweeps_the_anchor(tmp_path):
    """Connect Four's default beats UCT-1000 in every game from generation 9 on; its games
    against the previous best (``vs_previous``, the same player as that model's own
    evaluation) chain it to the generations UCT still measures: a finite rating, an
    ``elo_gain`` with its interval, and no ``elo_unbounded`` in the metrics. Without those
    games (a run from before them) the same champion is said to be unbounded."""
    from zeroloop.engine.rating import fit_league, unbounded_side

    def result(opponent, wins, draws, losses):
        return {"opponent": opponent, "score": (wins + draws / 2) / (wins + draws + losses), "wins": wins,
                "draws": draws, "losses": losses}

    p = parse_params({"game": "connect4", "evaluate": {"simulations": 200}})
    rows = []
    for g, (uct, prev) in enumerate((((18, 0, 12), (26, 0, 4)), ((27, 0, 3), (19, 2, 9)),
                                     ((30, 0, 0), (18, 1, 11))), start=1):
        ev = {"model": f"gen{g}", "simulations": 200, "vs_random": result("random", 30, 0, 0),
              "vs_uct": result("uct1000", *uct), "vs_previous": result(f"gen{g - 1}", *prev)}
        gate = {"generation": g, "candidate": f"gen{g}", "opponent": f"gen{g - 1}", "simulations": 100,
                "wins": 12, "draws": 0, "losses": 8, "score": 0.6, "accepted": True}
        rows.append({"eval": ev, "gate": gate, "train": {"train_loss": 1.0}, "selfplay": {"mean_length": 30}})
    evals, gates = report.match_results(p, rows)
    assert ("gen3@200", "gen2@200", 18, 1, 11) in evals and ("gen1@200", "gen0@200", 26, 0, 4) in evals
    anchor = report.anchor_of(p, evals)
    assert anchor == "uct1000"
    elo = fit_league(evals, anchor=anchor)
    table = report.table(p, rows, elo, fit_league(gates, anchor="gen0@100"))
    assert [r["vs_previous"] for r in table] == [26 / 30, 20 / 30, 18.5 / 30]
    assert table[-1]["elo_se"] < 250 and table[-1]["elo_gain_se"] < 200
    assert unbounded_side(evals, "gen3@200", anchor) is None
    before = [e for e in evals if not e[1].startswith("gen")]  # the same run without those games
    assert unbounded_side(before, "gen3@200", anchor) == "above"
    assert fit_league(before, anchor=anchor).rating("gen3@200")[1] > 1000
    for row in table:
        row.update(value_loss=0.5, policy_loss=0.5)
    assert tmp_path / "scores.png" in plots.draw_plots(table, "connect4", anchor, tmp_path)
