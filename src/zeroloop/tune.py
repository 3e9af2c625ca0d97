"""Optuna studies over the search hyperparameters (c_puct, temperature).

The *search* objective: a fixed trained model plays with the sampled search
settings against a fixed reference player over a fixed, seeded set of
openings (the same for every trial: common random numbers, so differences
between trials are not opening luck). The score is wins + draws/2 over the
games. Games are played in ``tune.rounds`` rounds; after each the running
score is reported so a pruner can stop a poor trial early.

Every trial is also an MLflow run nested under one parent run per study.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zeroloop.arena import PlayerSpec, play_match
from zeroloop.config import Params, TuneParams


@dataclass(frozen=True)
class TrialSettings:
    c_puct: float
    temperature: float
    temperature_moves: int

    def as_params(self) -> dict[str, Any]:
        return {"c_puct": self.c_puct, "temperature": self.temperature,
                "temperature_moves": self.temperature_moves}


def suggest(trial, space: TuneParams) -> TrialSettings:
    """Sample one point of the search space (optuna ``Trial``)."""
    return TrialSettings(
        c_puct=trial.suggest_float("c_puct", space.c_puct.low, space.c_puct.high, log=space.c_puct.log),
        temperature=trial.suggest_float("temperature", space.temperature.low, space.temperature.high),
        temperature_moves=trial.suggest_int("temperature_moves", space.temperature_moves.low,
                                            space.temperature_moves.high))


def reference_player(space: TuneParams) -> PlayerSpec:
    if space.reference == "uct":
        return PlayerSpec("uct", f"uct{space.reference_playouts}", playouts=space.reference_playouts)
    return PlayerSpec(space.reference, space.reference)


def search_objective_score(params: Params, model: str, settings: TrialSettings, *, seed: int,
                           report=None, workers: int | None = None, progress: bool = False) -> float:
    """Score of ``model`` searched with ``settings`` against the reference.

    ``report(score_so_far, round)`` is called after each round; it may raise
    to stop the trial (Optuna's ``TrialPruned``).
    """
    game = params.make_game()
    space = params.tune
    me = PlayerSpec("mcts", "candidate", model=model, simulations=space.simulations,
                    c_puct=settings.c_puct, temperature=settings.temperature,
                    temperature_moves=settings.temperature_moves, device=params.runtime.device)
    ref = reference_player(space)
    pairs = space.games // 2
    per_round = max(1, math.ceil(pairs / space.rounds))
    points = games = 0.0
    for r, start in enumerate(range(0, pairs, per_round)):
        n = min(per_round, pairs - start)
        # round r always gets the same openings and seeds, whatever the settings
        m = play_match(game, me, ref, games=2 * n, opening_plies=space.opening_plies,
                       seed=int(np.random.SeedSequence([seed, r]).generate_state(1)[0]),
                       workers=workers, progress=progress, desc=f"round {r + 1}")
        s = m.score
        points += s.wins + s.draws / 2
        games += s.games
        if report is not None:
            report(points / games, r)
    return points / games


def open_storage(url: str):
    """An Optuna storage from a URL: ``journal:PATH`` is a journal file (safe
    for several processes on one machine); anything else is an RDB URL
    (``sqlite:///optuna.db`` for one process, PostgreSQL/MySQL for many machines)."""
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    return url


def run_search_study(params: Params, *, model: str, trials: int, study_name: str, storage: str,
                     seed: int = 0, workers: int | None = None, tracker=None) -> Any:
    """Run (or resume) a study of the search objective; returns the optuna Study.

    A trial that raises is recorded as failed (in Optuna and MLflow) and the
    study goes on.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
              "wilcoxon": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1),
              "none": optuna.pruners.NopPruner}[params.tune.pruner]()
    study = optuna.create_study(study_name=study_name, storage=open_storage(storage), direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner,
                                load_if_exists=True)
    study.set_user_attr("objective", "search")
    study.set_user_attr("model", os.path.abspath(model))

    def objective(trial) -> float:
        settings = suggest(trial, params.tune)
        run = tracker.trial_run(trial.number, settings.as_params()) if tracker else None

        def report(value: float, step: int) -> None:
            trial.report(value, step)
            if run is not None:
                run.log({"score": value}, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        try:
            score = search_objective_score(params, model, settings, seed=seed, report=report, workers=workers)
        except optuna.TrialPruned:
            if run is not None:
                run.end("PRUNED")
            raise
        except Exception as exc:
            if run is not None:
                run.end("FAILED", error=f"{type(exc).__name__}: {exc}")
            raise
        if run is not None:
            run.log({"final_score": score}, None)
            run.end("COMPLETE")
        return score

    study.optimize(objective, n_trials=trials, catch=(Exception,), gc_after_trial=True)
    return study


def best_params_yaml(study, path: str | Path) -> dict:
    """Write the best trial's settings as params.yaml keys, with the command to apply them."""
    import yaml

    from zeroloop.storage import atomic_write_bytes

    best = study.best_trial
    keys = {"mcts.c_puct": round(best.params["c_puct"], 4),
            "evaluate.temperature": round(best.params["temperature"], 4),
            "evaluate.temperature_moves": int(best.params["temperature_moves"]),
            "gate.temperature": round(best.params["temperature"], 4),
            "gate.temperature_moves": int(best.params["temperature_moves"])}
    command = "dvc exp run " + " ".join(f"-S {k}={v}" for k, v in keys.items())
    data = {"study": study.study_name, "trial": best.number, "score": round(best.value, 4),
            "params": keys, "apply": command}
    atomic_write_bytes(path, yaml.safe_dump(data, sort_keys=False).encode())
    return data


def save_plots(study, out_dir: str | Path) -> list[Path]:
    """Optimisation history, parameter importances and a c_puct x temperature
    contour as PNGs; a plot that needs more finished trials is skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as vis

    from zeroloop.storage import atomic_write_bytes

    out_dir = Path(out_dir)
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    makers = {"history": (1, lambda: vis.plot_optimization_history(study)),
              "importances": (2, lambda: vis.plot_param_importances(study)),
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


def parallel_search_study(params_file: str, *, model: str, trials: int, study_name: str, storage: str,
                          seed: int, jobs: int) -> None:
    """Run ``jobs`` processes that share one study through ``storage`` (not
    SQLite); each runs its share of ``trials`` with cores/jobs match workers."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from zeroloop.workers import default_workers

    if storage.startswith("sqlite"):
        raise ValueError("--jobs > 1 needs a storage several processes can share: "
                         "--storage journal:optuna.journal (one machine) or a PostgreSQL URL")
    # create the study once, so the workers do not race to create it
    import optuna

    optuna.create_study(study_name=study_name, storage=open_storage(storage), direction="maximize",
                        load_if_exists=True)
    shares = [trials // jobs + (i < trials % jobs) for i in range(jobs)]
    per_job = max(1, default_workers() // jobs)
    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
        futures = [ex.submit(_study_job, params_file, model, n, study_name, storage, seed + i, per_job)
                   for i, n in enumerate(shares) if n]
        for f in futures:
            f.result()


def _study_job(params_file: str, model: str, trials: int, study_name: str, storage: str, seed: int,
               workers: int) -> None:
    from zeroloop.config import load_params
    from zeroloop.stages.common import setup_process
    from zeroloop.tracking import StudyTracker

    setup_process()
    params = load_params(params_file)
    tracker = StudyTracker.open(params, study_name, storage, {"objective": "search"})
    run_search_study(params, model=model, trials=trials, study_name=study_name, storage=storage,
                     seed=seed, workers=workers, tracker=tracker)
