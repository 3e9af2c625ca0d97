"""Optuna studies over the search hyperparameters (c_puct, temperature).

The *selfplay* objective: each trial trains a fresh network for a few
generations with the sampled self-play settings and is scored the same way,
with the score after each generation reported for pruning.

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


def selfplay_objective_score(params: Params, settings: TrialSettings, workdir: str | Path, *, seed: int,
                             report=None, workers: int | None = None) -> float:
    """Train a fresh network for ``tune.selfplay_generations`` generations with
    the sampled self-play settings (same library code as the DVC stages:
    sharded self-play, replay window, Lightning training; every candidate is
    kept), then score it like the search objective with the default search
    settings. ``report(score, generation)`` follows each generation."""
    import torch

    from zeroloop.nn.data import load_replay
    from zeroloop.nn.module import OptimConfig, fit_network
    from zeroloop.nn.net import NetConfig, PolicyValueNet
    from zeroloop.search import MoveSchedule, SearchConfig
    from zeroloop.selfplay_jobs import SelfplayJob, run_selfplay
    from zeroloop.storage import save_model

    game, space, t = params.make_game(), params.tune, params.train
    workdir = Path(workdir)
    torch.manual_seed(seed)
    net = PolicyValueNet.for_game(game, NetConfig(**params.net.model_dump()))
    best = workdir / "best.pt"
    save_model(best, net, game)
    m = params.mcts
    search = SearchConfig(simulations=m.simulations, c_puct=settings.c_puct,
                          dirichlet_alpha=m.dirichlet_alpha, dirichlet_epsilon=m.dirichlet_epsilon,
                          leaves_per_game=m.leaves_per_game)
    schedule = MoveSchedule(temperature=settings.temperature,
                            temperature_moves=settings.temperature_moves)
    optim = OptimConfig(optimizer=t.optimizer, lr=t.lr, momentum=t.momentum, lr_schedule=t.lr_schedule,
                        lr_step_epochs=t.lr_step_epochs, lr_step_gamma=t.lr_step_gamma, l2=t.l2,
                        epochs=t.epochs, augment=t.augment)
    default = TrialSettings(c_puct=m.c_puct, temperature=0.0, temperature_moves=0)
    window: list[Path] = []
    score = 0.0
    for gen in range(1, space.selfplay_generations + 1):
        out = workdir / f"gen_{gen}"
        job = SelfplayJob(game=game.name, model=str(best), games=space.selfplay_games, search=search,
                          schedule=schedule, seed=seed * 1000 + gen, shard_games=params.selfplay.shard_games,
                          device=params.runtime.device)
        run_selfplay(job, workers=workers, progress=False, out_dir=out)
        window = [out, *window][: t.replay_generations]
        data = load_replay(game, sorted(str(p) for d in window for p in d.glob("shard_*.zls")))
        fit_network(net, game, data, optim, batch_size=t.batch_size, val_fraction=0.0, seed=seed + gen,
                    device=params.runtime.device, progress=False)
        save_model(best, net, game, meta={"generation": gen})
        score = search_objective_score(params, str(best), default, seed=seed, workers=workers)
        if report is not None:
            report(score, gen)
    return score


def default_settings(params: Params, objective: str) -> TrialSettings:
    """The settings params.yaml uses now, clipped into the search space."""
    space = params.tune
    src = params.selfplay if objective == "selfplay" else params.evaluate
    clip = lambda v, r: min(max(v, r.low), r.high)  # noqa: E731
    return TrialSettings(c_puct=clip(params.mcts.c_puct, space.c_puct),
                         temperature=clip(src.temperature, space.temperature),
                         temperature_moves=int(clip(src.temperature_moves, space.temperature_moves)))


def open_storage(url: str):
    """An Optuna storage from a URL: ``journal:PATH`` is a journal file (safe
    for several processes on one machine); anything else is an RDB URL
    (``sqlite:///optuna.db`` for one process, PostgreSQL/MySQL for many machines)."""
    if url.startswith("journal:"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    return url


def run_search_study(params: Params, *, model: str | None, trials: int, study_name: str, storage: str,
                     seed: int = 0, workers: int | None = None, tracker=None, objective: str = "search",
                     ) -> Any:
    """Run (or resume) a study; returns the optuna Study. ``objective``:
    ``search`` (``model`` under the sampled settings) or ``selfplay`` (a short
    training run per trial, in a temporary directory).

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
    if not study.trials:
        # the current settings go first, on the same openings: the gain of the best is measured against them
        study.enqueue_trial(default_settings(params, objective).as_params(), user_attrs={"default": True})
    study.set_user_attr("objective", objective)
    study.set_user_attr("games_per_trial", 2 * (params.tune.games // 2))
    if model:
        study.set_user_attr("model", os.path.abspath(model))

    def evaluate_trial(trial) -> float:
        settings = suggest(trial, params.tune)
        run = tracker.trial_run(trial.number, settings.as_params()) if tracker else None

        def report(value: float, step: int) -> None:
            trial.report(value, step)
            if run is not None:
                run.log({"score": value}, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        try:
            if objective == "selfplay":
                import tempfile

                with tempfile.TemporaryDirectory(prefix=f"zeroloop-trial{trial.number}-") as tmp:
                    score = selfplay_objective_score(params, settings, tmp, seed=seed, report=report,
                                                     workers=workers)
            else:
                score = search_objective_score(params, model, settings, seed=seed, report=report,
                                               workers=workers)
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

    study.optimize(evaluate_trial, n_trials=trials, catch=(Exception,), gc_after_trial=True)
    return study


def best_params_yaml(study, path: str | Path) -> dict:
    """Write the best trial's settings as params.yaml keys, with the command to apply them."""
    import yaml

    from zeroloop.storage import atomic_write_bytes

    best = study.best_trial
    temp, moves = round(best.params["temperature"], 4), int(best.params["temperature_moves"])
    keys: dict[str, Any] = {"mcts.c_puct": round(best.params["c_puct"], 4)}
    if study.user_attrs.get("objective") == "selfplay":  # the settings self-play ran with
        keys.update({"selfplay.temperature": temp, "selfplay.temperature_moves": moves})
    else:  # the settings the model played its matches with
        keys.update({"evaluate.temperature": temp, "evaluate.temperature_moves": moves,
                     "gate.temperature": temp, "gate.temperature_moves": moves})
    command = "dvc exp run " + " ".join(f"-S {k}={v}" for k, v in keys.items())
    data = {"study": study.study_name, "trial": best.number, "score": round(best.value, 4),
            "params": keys, "apply": command}
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


def parallel_search_study(params_file: str, *, model: str | None, trials: int, study_name: str,
                          storage: str, seed: int, jobs: int, objective: str = "search") -> None:
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
        futures = [ex.submit(_study_job, params_file, model, n, study_name, storage, seed + i, per_job,
                             objective)
                   for i, n in enumerate(shares) if n]
        for f in futures:
            f.result()


def _study_job(params_file: str, model: str | None, trials: int, study_name: str, storage: str,
               seed: int, workers: int, objective: str) -> None:
    from zeroloop.config import load_params
    from zeroloop.stages.common import setup_process
    from zeroloop.tracking import StudyTracker

    setup_process()
    params = load_params(params_file)
    tracker = StudyTracker.open(params, study_name, storage, {"objective": objective})
    run_search_study(params, model=model, trials=trials, study_name=study_name, storage=storage,
                     seed=seed, workers=workers, tracker=tracker, objective=objective)
