"""A study's results: the confirmation of the best settings on fresh
openings, best_params.yaml and the plots."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from zeroloop.pipeline.matches import play_match
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.tuning.objectives import (
    TrialSettings,
    candidate_player,
    reference_player,
    selfplay_games,
    solver_correct,
    solver_position_set,
)


def confirm_gain(params: Params, model: str, best: TrialSettings, default: TrialSettings, *, seed: int,
                 workers: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Replay the best and the default settings on ``tune.confirm_games`` fresh openings.

    The best trial's study score is biased upwards (it is the largest of many
    noisy scores), so the gain is measured again on openings no trial was
    selected on. Both settings play the same openings with the same seeds
    (paired); the 95% interval comes from the per-opening differences.
    """
    game, space = params.make_game(), params.tune
    fresh = int(np.random.SeedSequence([seed, 0xC0F1]).generate_state(1)[0])
    if space.metric in ("solver", "validation"):  # fresh positions, the same for both settings
        positions = solver_position_set(params, fresh, count=space.confirm_games)
        per = {k: solver_correct(params, model, s, positions, seed=fresh).astype(float)
               for k, s in (("default", default), ("best", best))}
        return _paired_gain(per["best"], per["default"], "positions", fresh)
    ref = reference_player(space)
    matches = {}
    for label, settings in (("default", default), ("best", best)):
        matches[label] = play_match(game, candidate_player(params, model, settings, label), ref,
                                    games=space.confirm_games, opening_plies=space.opening_plies, seed=fresh,
                                    workers=workers, progress=progress, desc=f"confirm {label}")
    plies = space.opening_plies
    openings = {k: [tuple(g.actions[:plies]) for g in m.games] for k, m in matches.items()}
    if openings["best"] != openings["default"]:
        raise RuntimeError("confirmation matches did not play the same openings")
    pair_scores = {k: np.array([(g.result + 1) / 2 for g in m.games]).reshape(-1, 2).mean(axis=1)
                   for k, m in matches.items()}
    return _paired_gain(pair_scores["best"], pair_scores["default"], "games", fresh, space.confirm_games)


def _paired_gain(best: np.ndarray, default: np.ndarray, unit: str, seed: int, count: int | None = None
                 ) -> dict[str, Any]:
    """Mean paired difference with a normal 95% interval."""
    diff = best - default
    gain = float(diff.mean())
    half = 1.96 * float(diff.std(ddof=1)) / math.sqrt(len(diff)) if len(diff) > 1 else float("inf")
    return {unit: int(count if count is not None else len(diff)), "seed": seed,
            "default_score": round(float(default.mean()), 4), "best_score": round(float(best.mean()), 4),
            "gain": round(gain, 4), "gain_ci95": [round(gain - half, 4), round(gain + half, 4)]}


def paired_positions(default, best) -> dict[str, Any] | None:
    """Metric solver / validation: the best trial against trial 0 on the same
    positions, position by position (both trials' per-position results, as
    the study stored them): the gain in the share of result-keeping moves
    with its paired 95% interval, the positions only one of them got right,
    and McNemar's exact p. None when either trial has no such record."""
    from zeroloop.engine.positions import paired_errors
    from zeroloop.pipeline.tuning.objectives import decode_correct

    a, b = default.user_attrs.get("correct"), best.user_attrs.get("correct")
    if not a or not b or len(a) != len(b):
        return None
    e = paired_errors(~decode_correct(a), ~decode_correct(b))  # mistakes: default first, best second
    low, high = e["difference_ci95"]
    return {"positions": e["positions"], "gain": float(round(-e["difference"], 4)) + 0.0,
            "gain_ci95": [float(-high) + 0.0, float(-low) + 0.0],  # + 0.0: no -0.0 in the file
            "only_default_right": e["only_second"], "only_best_right": e["only_first"],
            "mcnemar_p": float(e["mcnemar_p"])}


def best_params_yaml(study, path: str | Path, confirmed: dict[str, Any] | None = None) -> dict:
    """Write the best trial's settings as params.yaml keys, with the command to
    apply them, the gain over the default settings (trial 0) on the study's
    openings and, when given, the confirmation on fresh openings."""
    import yaml

    from zeroloop.pipeline.data.storage import atomic_write_bytes

    best = study.best_trial
    temp, moves = round(best.params["temperature"], 4), int(best.params["temperature_moves"])
    keys: dict[str, Any] = {"mcts.c_puct": round(best.params["c_puct"], 4)}
    budget_note = None
    if study.user_attrs.get("objective") == "selfplay":  # the settings self-play ran with
        keys.update({"selfplay.temperature": temp, "selfplay.temperature_moves": moves})
        if "simulations" in best.params:  # the full run's games scaled as the trials' were
            sims = int(best.params["simulations"])
            keys["mcts.simulations"] = sims
            keys["selfplay.games"] = selfplay_games(study.user_attrs["selfplay_games"], sims,
                                                    study.user_attrs["selfplay_simulations"])
            games, current = keys["selfplay.games"], study.user_attrs["selfplay_games"]
            ratio = games / current
            if ratio != 1:  # equal search is not equal CPU: training scales with the games
                budget_note = (
                    f"selfplay.games {games} (not {current}) keeps "
                    "games x simulations as the trials did, the same search a generation, but "
                    f"{ratio:.2g}x the positions to train on, so training costs about {ratio:.2g}x the "
                    "current run's: for a comparison at equal CPU, set selfplay.games from measured "
                    "costs (docs/tuning.md, Studies run so far)")
        keys.update({f"mcts.{k}": round(best.params[k], 4) for k in ("dirichlet_alpha", "dirichlet_epsilon")
                     if k in best.params})
    else:  # the settings the model played its matches with
        keys.update({"evaluate.temperature": temp, "evaluate.temperature_moves": moves,
                     "gate.temperature": temp, "gate.temperature_moves": moves})
    command = "dvc exp run " + " ".join(f"-S {k}={v}" for k, v in keys.items())
    data = {"study": study.study_name, "metric": study.user_attrs.get("metric", "match"),
            "trial": best.number, "score": round(best.value, 4),
            "params": keys, "apply": command}
    if budget_note:
        data["budget_note"] = budget_note
    defaults = [t for t in study.trials if t.user_attrs.get("default") and t.value is not None]
    if defaults:
        # both scores come from the same number of games; normal approximation, unpaired (conservative)
        n = study.user_attrs.get("games_per_trial") or 0
        d = defaults[0].value
        gain = best.value - d
        data.update(default_score=round(d, 4), gain=round(gain, 4))
        if n:
            se = math.sqrt((best.value * (1 - best.value) + d * (1 - d)) / n)
            data["gain_ci95"] = [round(gain - 1.96 * se, 4), round(gain + 1.96 * se, 4)]
        paired = paired_positions(defaults[0], best)
        if paired:
            data["paired"] = paired
    if confirmed:
        data["confirmed"] = confirmed
    atomic_write_bytes(path, yaml.safe_dump(data, sort_keys=False).encode())
    return data


def save_plots(study, out_dir: str | Path) -> list[Path]:
    """Optimisation history, parameter importances and a c_puct x temperature
    contour as PNGs; a plot that needs more finished trials is skipped (the
    importances, a random forest's fANOVA over the trials, from 8: over fewer
    it ranks noise, and fitting it cost a short study seconds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    from zeroloop.pipeline.data.storage import atomic_write_bytes

    out_dir = Path(out_dir)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    makers = {"history": (1, lambda: vis.plot_optimization_history(study)),
              "importances": (8, lambda: vis.plot_param_importances(study)),
              "contour": (2, lambda: vis.plot_contour(study, params=["c_puct", "temperature"]))}
    paths = []
    for name, (needed, make) in makers.items():
        if len(done) < needed:
            continue
        import io
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # optuna marks its matplotlib plots experimental
            ax = make()
        fig = (ax.flat[0] if hasattr(ax, "flat") else ax).get_figure()
        buf = io.BytesIO()
        fig.set_size_inches(7, 5)
        fig.tight_layout()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        path = out_dir / f"{name}.png"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths
