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
import sys
from contextlib import contextmanager
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
    dirichlet_alpha: float | None = None  # selfplay objective, when tune: has a range for it
    dirichlet_epsilon: float | None = None

    def as_params(self) -> dict[str, Any]:
        out = {"c_puct": self.c_puct, "temperature": self.temperature,
               "temperature_moves": self.temperature_moves}
        for key in ("dirichlet_alpha", "dirichlet_epsilon"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def noise_dims(space: TuneParams, objective: str) -> list[str]:
    """The Dirichlet noise dimensions tuned: only self-play searches with root noise."""
    if objective != "selfplay":
        return []
    return [k for k in ("dirichlet_alpha", "dirichlet_epsilon") if getattr(space, k) is not None]


def suggest(trial, space: TuneParams, objective: str = "search") -> TrialSettings:
    """Sample one point of the search space (optuna ``Trial``)."""
    noise = {k: trial.suggest_float(k, getattr(space, k).low, getattr(space, k).high,
                                    log=getattr(space, k).log)
             for k in noise_dims(space, objective)}
    return TrialSettings(
        c_puct=trial.suggest_float("c_puct", space.c_puct.low, space.c_puct.high, log=space.c_puct.log),
        temperature=trial.suggest_float("temperature", space.temperature.low, space.temperature.high),
        temperature_moves=trial.suggest_int("temperature_moves", space.temperature_moves.low,
                                            space.temperature_moves.high), **noise)


def reference_player(space: TuneParams) -> PlayerSpec:
    if space.reference == "uct":
        return PlayerSpec("uct", f"uct{space.reference_playouts}", playouts=space.reference_playouts)
    return PlayerSpec(space.reference, space.reference)


def candidate_player(params: Params, model: str, settings: TrialSettings, name: str = "candidate"
                     ) -> PlayerSpec:
    return PlayerSpec("mcts", name, model=model, simulations=params.tune.simulations, c_puct=settings.c_puct,
                      temperature=settings.temperature, temperature_moves=settings.temperature_moves,
                      device=params.runtime.device)


def search_objective_score(params: Params, model: str, settings: TrialSettings, *, seed: int,
                           report=None, workers: int | None = None, progress: bool = False) -> float:
    """Score of ``model`` searched with ``settings`` against the reference.

    ``report(score_so_far, round, round_score)`` is called after each round;
    it may raise to stop the trial (Optuna's ``TrialPruned``).
    """
    game = params.make_game()
    space = params.tune
    me = candidate_player(params, model, settings)
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
            report(points / games, r, (s.wins + s.draws / 2) / s.games)
    return points / games


def solver_position_set(params: Params, seed: int, count: int | None = None, salt: int = 0x501):
    """Positions labelled by a perfect player (the same for every trial of a
    study with this seed): random lines, kept where the choice matters."""
    from zeroloop.evaluate import make_position_set, perfect_scorer

    game = params.make_game()
    scorer = perfect_scorer(game)
    if scorer is None:
        raise ValueError(f"tune.metric: solver needs a perfect player for {game.name}: tic-tac-toe, or "
                         "Connect Four with the solver extra (pip install -e '.[solver]')")
    rng = np.random.default_rng(np.random.SeedSequence([seed, salt]))
    return make_position_set(game, count or params.tune.solver_positions, rng, scorer)


def solver_correct(params: Params, model: str, settings: TrialSettings, positions, *, seed: int,
                   report=None) -> np.ndarray:
    """Whether the searched move keeps the position's result, per position.

    The move is chosen as in play: sampled from the visits at ``temperature``
    on plies below ``temperature_moves``, else the most visited. Positions
    are searched in ``tune.rounds`` batches; ``report(score_so_far, round,
    round_score)`` follows each."""
    from zeroloop.evaluate import PositionSet, move_errors
    from zeroloop.nn import NetworkEvaluator
    from zeroloop.search import BatchedMCTS, MoveSchedule, SearchConfig, choose_move
    from zeroloop.storage import load_model

    game, space = params.make_game(), params.tune
    net, _, _ = load_model(model, game)
    ev = NetworkEvaluator(game, net, params.runtime.device)
    states = positions.states(game)
    schedule = MoveSchedule(temperature=settings.temperature, temperature_moves=settings.temperature_moves)
    cfg = SearchConfig(simulations=space.simulations, c_puct=settings.c_puct)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5C0]))
    correct = np.zeros(len(states), bool)
    chunks = np.array_split(np.arange(len(states)), min(space.rounds, len(states)))
    for r, chunk in enumerate(chunks):
        mcts = BatchedMCTS(game, ev, cfg, len(chunk), rng=rng)
        for k, i in enumerate(chunk):
            mcts.set_root(k, states[i])
        visits = mcts.search(list(range(len(chunk))), add_noise=False).visits
        chosen = [choose_move(visits[k], schedule.temperature_at(states[i].ply), rng)
                  for k, i in enumerate(chunk)]
        sub = PositionSet(positions.game, [positions.moves[i] for i in chunk], positions.labels[chunk])
        errors = move_errors(sub, chosen)  # also refuses an illegal choice
        correct[chunk] = positions.labels[chunk, chosen] == positions.labels[chunk].max(axis=1)
        if report is not None:
            seen = np.concatenate(chunks[:r + 1])
            report(float(correct[seen].mean()), r, 1.0 - errors.rate)
    return correct


def model_score(params: Params, model: str, settings: TrialSettings, *, seed: int, report=None,
                workers: int | None = None, positions=None) -> float:
    """``tune.metric``: the match score against the reference, or the share
    of solver-labelled positions where the searched move keeps the result."""
    if params.tune.metric == "solver":
        positions = positions if positions is not None else solver_position_set(params, seed)
        return float(solver_correct(params, model, settings, positions, seed=seed, report=report).mean())
    return search_objective_score(params, model, settings, seed=seed, report=report, workers=workers)


def selfplay_objective_score(params: Params, settings: TrialSettings, workdir: str | Path, *, seed: int,
                             report=None, workers: int | None = None) -> float:
    """Train a fresh network for ``tune.selfplay_generations`` generations with
    the sampled self-play settings (same library code as the DVC stages:
    sharded self-play, replay window, Lightning training; every candidate is
    kept), then score it like the search objective with the default search
    settings. ``report(score, generation, score)`` follows each generation."""
    import torch

    from zeroloop.nn.data import load_replay
    from zeroloop.nn.module import OptimConfig, fit_network
    from zeroloop.nn.net import NetConfig, PolicyValueNet
    from zeroloop.search import MoveSchedule, SearchConfig
    from zeroloop.selfplay_jobs import SelfplayJob, run_selfplay
    from zeroloop.stages.common import quiet_libraries
    from zeroloop.storage import save_model

    quiet_libraries()  # again: importing Lightning sets its logger back to INFO
    game, space, t = params.make_game(), params.tune, params.train
    workdir = Path(workdir)
    torch.manual_seed(seed)
    net = PolicyValueNet.for_game(game, NetConfig(**params.net.model_dump()))
    best = workdir / "best.pt"
    save_model(best, net, game)
    m = params.mcts
    alpha = m.dirichlet_alpha if settings.dirichlet_alpha is None else settings.dirichlet_alpha
    eps = m.dirichlet_epsilon if settings.dirichlet_epsilon is None else settings.dirichlet_epsilon
    search = SearchConfig(simulations=m.simulations, c_puct=settings.c_puct,
                          dirichlet_alpha=alpha, dirichlet_epsilon=eps,
                          leaves_per_game=m.leaves_per_game)
    schedule = MoveSchedule(temperature=settings.temperature,
                            temperature_moves=settings.temperature_moves)
    optim = OptimConfig(optimizer=t.optimizer, lr=t.lr, momentum=t.momentum, lr_schedule=t.lr_schedule,
                        lr_step_epochs=t.lr_step_epochs, lr_step_gamma=t.lr_step_gamma, l2=t.l2,
                        epochs=t.epochs, augment=t.augment)
    default = TrialSettings(c_puct=m.c_puct, temperature=0.0, temperature_moves=0)
    positions = solver_position_set(params, seed) if space.metric == "solver" else None
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
        score = model_score(params, str(best), default, seed=seed, workers=workers, positions=positions)
        if report is not None:
            report(score, gen, score)
    return score


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
    if space.metric == "solver":  # fresh positions, the same for both settings
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


def default_settings(params: Params, objective: str) -> TrialSettings:
    """The settings params.yaml uses now, clipped into the search space."""
    space = params.tune
    src = params.selfplay if objective == "selfplay" else params.evaluate
    clip = lambda v, r: min(max(v, r.low), r.high)  # noqa: E731
    noise = {k: clip(getattr(params.mcts, k), getattr(space, k)) for k in noise_dims(space, objective)}
    return TrialSettings(c_puct=clip(params.mcts.c_puct, space.c_puct),
                         temperature=clip(src.temperature, space.temperature),
                         temperature_moves=int(clip(src.temperature_moves, space.temperature_moves)),
                         **noise)


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
                     progress: bool = True, sampler_seed: int | None = None) -> Any:
    """Run (or resume) a study; returns the optuna Study. ``objective``:
    ``search`` (``model`` under the sampled settings) or ``selfplay`` (a short
    training run per trial, in a temporary directory).

    A trial that raises is recorded as failed (in Optuna and MLflow) and the
    study goes on.
    """
    import optuna

    if objective == "selfplay" and params.tune.pruner == "wilcoxon":
        raise ValueError("tune.pruner: wilcoxon pairs the per-round scores of the search objective; "
                         "use median (or none) with --objective selfplay")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
              "wilcoxon": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1),
              "none": optuna.pruners.NopPruner}[params.tune.pruner]()
    study = optuna.create_study(study_name=study_name, storage=open_storage(storage), direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed if sampler_seed is None
                                                                   else sampler_seed), pruner=pruner,
                                load_if_exists=True)
    if not study.trials:
        # the current settings go first, on the same openings: the gain of the best is measured against them
        study.enqueue_trial(default_settings(params, objective).as_params(), user_attrs={"default": True})
    positions = solver_position_set(params, seed) if params.tune.metric == "solver" else None
    study.set_user_attr("objective", objective)
    study.set_user_attr("metric", params.tune.metric)
    # the sample size behind one trial's score: games, or solver positions
    study.set_user_attr("games_per_trial", len(positions.moves) if positions is not None
                        else 2 * (params.tune.games // 2))
    if model:
        study.set_user_attr("model", os.path.abspath(model))

    mine: set[int] = set()  # trial numbers this process started
    interrupts = _Interrupts()

    def evaluate_trial(trial) -> float:
        mine.add(trial.number)
        trial.set_user_attr("seed", seed)  # of the openings / positions: equal seeds, comparable scores
        settings = suggest(trial, params.tune, objective)
        run = tracker.trial_run(trial.number, settings.as_params()) if tracker else None

        def report(value: float, step: int, step_value: float) -> None:
            # median pruner: the running score, compared with other trials' at the same round;
            # Wilcoxon: each round's own score (rounds are the same openings in every trial, so
            # the test pairs them with the best trial's rounds)
            trial.report(step_value if params.tune.pruner == "wilcoxon" else value, step)
            if run is not None:
                run.log({"score": value, "round_score": step_value}, step)
            if trial.should_prune():
                raise optuna.TrialPruned()

        try:
            with interrupts.live():  # Ctrl-C stops the games at once, not the bookkeeping around them
                if objective == "selfplay":
                    import tempfile

                    with tempfile.TemporaryDirectory(prefix=f"zeroloop-trial{trial.number}-") as tmp:
                        score = selfplay_objective_score(params, settings, tmp, seed=seed, report=report,
                                                         workers=workers)
                else:
                    score = model_score(params, model, settings, seed=seed, report=report,
                                        workers=workers, positions=positions)
        except optuna.TrialPruned:
            if run is not None:
                run.end("PRUNED")
            raise
        except Exception as exc:
            if run is not None:
                run.end("FAILED", error=f"{type(exc).__name__}: {exc}")
            raise
        except KeyboardInterrupt:  # Optuna records the trial as failed and re-raises
            if run is not None:
                run.end("INTERRUPTED", error="KeyboardInterrupt")
            raise
        if run is not None:
            run.log({"final_score": score}, None)
            run.end("COMPLETE")
        return score

    from tqdm import tqdm

    bar = tqdm(total=trials, desc=f"study {study_name}", unit="trial", disable=not progress,
               dynamic_ncols=True)

    def after_trial(study, trial) -> None:
        shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in trial.params.items())
        result = f"{trial.value:.3f}" if trial.value is not None else trial.state.name.lower()
        if trial.state.name == "PRUNED" and trial.intermediate_values:
            last = max(trial.intermediate_values)
            where = f"generation {last}" if objective == "selfplay" else f"round {last + 1}"
            result = f"pruned after {where} ({trial.intermediate_values[last]:.3f})"
        try:
            best = f"best {study.best_value:.3f} (trial {study.best_trial.number})"
        except ValueError:
            best = "no complete trial yet"
        bar.write(f"trial {trial.number}: {result}  [{shown}]  {best}", file=sys.stderr)
        bar.update(1)
        interrupts.check()  # a Ctrl-C during the bookkeeping stops the study here, with the trial stored

    try:
        with interrupts.installed():
            study.optimize(evaluate_trial, n_trials=trials, catch=(Exception,), gc_after_trial=True,
                           callbacks=[after_trial])
    except KeyboardInterrupt:
        # an interrupt outside the objective (while Optuna stores a result, say) can leave our
        # trial RUNNING, which a resumed study would never finish: mark it failed
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if t.number in mine:
                study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        if tracker is not None:
            tracker.end_open_trials()
        raise
    finally:
        bar.close()
    return study


class _Interrupts:
    """SIGINT while a study runs: immediate inside the games (``live``),
    deferred elsewhere, so that Optuna's and MLflow's records of a trial are
    never cut in half; a deferred one is raised at the next ``check`` or
    ``live``."""

    def __init__(self) -> None:
        self.immediate = False
        self.pending = False

    def _handler(self, signum, frame) -> None:
        if self.immediate:
            raise KeyboardInterrupt
        self.pending = True

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    @contextmanager
    def live(self):
        self.check()
        self.immediate = True
        try:
            yield
        finally:
            self.immediate = False

    @contextmanager
    def installed(self):
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            self.immediate = True  # signals go to the main thread only; nothing to defer here
            yield
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
        self.check()


def best_params_yaml(study, path: str | Path, confirmed: dict[str, Any] | None = None) -> dict:
    """Write the best trial's settings as params.yaml keys, with the command to
    apply them, the gain over the default settings (trial 0) on the study's
    openings and, when given, the confirmation on fresh openings."""
    import yaml

    from zeroloop.storage import atomic_write_bytes

    best = study.best_trial
    temp, moves = round(best.params["temperature"], 4), int(best.params["temperature_moves"])
    keys: dict[str, Any] = {"mcts.c_puct": round(best.params["c_puct"], 4)}
    if study.user_attrs.get("objective") == "selfplay":  # the settings self-play ran with
        keys.update({"selfplay.temperature": temp, "selfplay.temperature_moves": moves})
        keys.update({f"mcts.{k}": round(best.params[k], 4) for k in ("dirichlet_alpha", "dirichlet_epsilon")
                     if k in best.params})
    else:  # the settings the model played its matches with
        keys.update({"evaluate.temperature": temp, "evaluate.temperature_moves": moves,
                     "gate.temperature": temp, "gate.temperature_moves": moves})
    command = "dvc exp run " + " ".join(f"-S {k}={v}" for k, v in keys.items())
    data = {"study": study.study_name, "metric": study.user_attrs.get("metric", "match"),
            "trial": best.number, "score": round(best.value, 4),
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
    if confirmed:
        data["confirmed"] = confirmed
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
        # the same seed (openings, positions) for every job; its own sampler seed each
        futures = [ex.submit(_study_job, params_file, model, n, study_name, storage, seed, seed + i,
                             per_job, objective)
                   for i, n in enumerate(shares) if n]
        for f in futures:
            f.result()


def _study_job(params_file: str, model: str | None, trials: int, study_name: str, storage: str,
               seed: int, sampler_seed: int, workers: int, objective: str) -> None:
    from zeroloop.config import load_params
    from zeroloop.stages.common import setup_process
    from zeroloop.tracking import StudyTracker

    setup_process()
    params = load_params(params_file)
    tracker = StudyTracker.open(params, study_name, storage, {"objective": objective})
    run_search_study(params, model=model, trials=trials, study_name=study_name, storage=storage,
                     seed=seed, workers=workers, tracker=tracker, objective=objective, progress=False,
                     sampler_seed=sampler_seed)
