"""``zeroloop tune`` from start to end: pick the model, run (or resume) the
study, confirm the best settings on fresh openings, write the results."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Where best_params.yaml and the plots go.
TUNING_DIR = Path("reports") / "tuning"


def choose_model(params, model: str | None, log: Callable[[str], None]) -> str:
    """``model``, or the pipeline's champion, else the newest generation's best,
    else the model shipped for the game; checked (game, damage) by name."""
    from zeroloop.pipeline.data.catalogue import list_models
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import load_model

    if model is None:
        found = [m for m in list_models(params.make_game()) if m.path]
        if not found:
            raise FileNotFoundError(f"{Layout().champion}: no such model file (run `make repro` first, "
                                    "or pass --model)")
        model = found[0].path
        log(f"tuning {found[0].label}: {model}")
    if not Path(model).is_file():
        raise FileNotFoundError(f"{model}: no such model file")
    load_model(model, params.make_game())  # a damaged or wrong-game model fails here, by name
    return model


def check_storage(url: str) -> None:
    """Open the Optuna storage once, so a bad URL fails before anything is
    logged; ValueError naming the URL (its password left out). Machines that
    open a new database at once race to create its tables: the loser tries again."""
    import time

    import optuna

    from zeroloop.pipeline.tuning.study import open_storage
    from zeroloop.pipeline.tuning.tracker import storage_key

    for attempt in range(5):
        try:
            optuna.storages.get_storage(open_storage(url))
            return
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy, journal and plugin errors alike
            text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            # two machines creating the tables at once: "already exists", or a unique violation in
            # PostgreSQL's catalogue ("duplicate key value ... pg_type_typname_nsp_index")
            if any(w in str(exc) for w in ("already exists", "duplicate key")) and attempt < 4:
                time.sleep(0.5 + attempt)
                continue
            raise ValueError(f"--storage {storage_key(url)!r}: cannot open it ({type(exc).__name__}: "
                             f"{text})") from None


def fail_lost_trials(tracker, study_name: str, storage: str, log: Callable[[str], None]) -> list[int]:
    """Fail the study's RUNNING trials that no process runs any more (their
    heartbeat stopped: killed with SIGKILL, a machine lost), end their MLflow
    runs and say so, a line each; returns their numbers. Trials whose
    process beats on (a parallel job, another machine) are left alone."""
    import optuna

    from zeroloop.pipeline.tuning.heartbeat import fail_stale, lost_line, lost_reason
    from zeroloop.pipeline.tuning.study import open_storage, storage_grace

    grace, lost = storage_grace(storage), []

    def on_lost(study, trial) -> None:
        tracker.lost(trial, lost_reason(grace))
        log(lost_line(trial.number, grace))
        lost.append(trial.number)

    try:
        study = optuna.load_study(study_name=study_name, storage=open_storage(storage, on_lost))
    except KeyError:  # a new study
        return []
    fail_stale(study)
    return lost


def backfill_trial_runs(tracker, study_name: str, storage: str, log: Callable[[str], None]) -> None:
    """A resumed study's finished trials with no MLflow run, or one never
    ended, get it from Optuna's record (:meth:`StudyTracker.backfill`). Here,
    before any trial, not in the parallel jobs: one process writes them."""
    import optuna

    from zeroloop.pipeline.tuning.study import open_storage

    try:
        study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
        trials = study.get_trials(deepcopy=False)
    except KeyError:  # a new study
        return
    done = tracker.backfill(trials)
    if done:
        log(f"trials {', '.join(map(str, done))}: no MLflow run (the tracking store failed before their "
            "process could send it); written now from the Optuna storage")


def tune(params_file: str, *, objective: str, trials: int, storage: str, study_name: str | None = None,
         model: str | None = None, seed: int = 0, workers: int | None = None, jobs: int = 1,
         timeout: float | None = None, out_dir: Path = TUNING_DIR,
         log: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """Run ``trials`` trials of the study and write its results; returns a
    summary (trial counts and ``best``, None when no trial completed).
    ``timeout``: seconds after which no new trial starts (each job's running
    trial finishes); the results are written as after ``trials`` trials.

    Raises ParamsError / ValueError / FileNotFoundError with one-line messages
    for bad input; KeyboardInterrupt leaves the storage and MLflow consistent.
    """
    from zeroloop.pipeline.params import load_params
    from zeroloop.pipeline.runtime.backend import use_backend
    from zeroloop.pipeline.runtime.process import quiet_libraries
    from zeroloop.pipeline.runtime.workers import keep_workers
    from zeroloop.pipeline.tracking.store import check_tracking
    from zeroloop.pipeline.tuning.heartbeat import heartbeat_interval
    from zeroloop.pipeline.tuning.objectives import TrialSettings, clipped_defaults, default_settings
    from zeroloop.pipeline.tuning.results import best_params_yaml, confirm_gain, save_plots
    from zeroloop.pipeline.tuning.study import (
        check_shared_storage,
        open_storage,
        parallel_search_study,
        run_search_study,
    )
    from zeroloop.pipeline.tuning.tracker import StudyTracker

    quiet_libraries()
    params = load_params(params_file)
    use_backend(params.runtime.worker_backend())
    # every refusal before anything is created: no study, no MLflow run
    check_shared_storage(storage, jobs)
    heartbeat_interval()  # a bad ZEROLOOP_TUNE_HEARTBEAT is named as such, not as the storage failing
    if objective == "search":
        model = choose_model(params, model, log)
    else:
        model = None
    check_tracking()
    check_storage(storage)
    study_name = study_name or f"{params.game}-{objective}"
    for line in clipped_defaults(params, objective):
        log(f"warning: {line}: widen the range to compare the study with the current settings")
    tracker = StudyTracker.open(params, study_name, storage,
                                {"objective": objective, "model": model or "", "seed": seed})
    fail_lost_trials(tracker, study_name, storage, log)  # before the backfill: it ends their runs
    backfill_trial_runs(tracker, study_name, storage, log)
    # one set of worker processes for every trial's rounds and the confirmation, not one per match
    with keep_workers():
        try:
            if jobs > 1:
                import optuna

                parallel_search_study(params_file, model=model, trials=trials, study_name=study_name,
                                      storage=storage, seed=seed, jobs=jobs, objective=objective,
                                      timeout=timeout)
                study = optuna.load_study(study_name=study_name, storage=open_storage(storage))
            else:
                study = run_search_study(params, model=model, trials=trials, study_name=study_name,
                                         storage=storage, seed=seed, workers=workers, tracker=tracker,
                                         objective=objective, timeout=timeout)
        except KeyboardInterrupt:
            tracker.interrupted()
            raise
        fail_lost_trials(tracker, study_name, storage, log)  # those whose grace ran out meanwhile
        trials_now = study.get_trials()
        states = [t.state.name for t in trials_now]
        running = [t.number for t in trials_now if t.state.name == "RUNNING"]
        if running:
            from zeroloop.pipeline.tuning.study import storage_grace

            log(f"trials {', '.join(map(str, running))}: RUNNING in another process, or in one that stopped "
                f"less than {storage_grace(storage)} s ago (the study's next run fails those)")
        best = None
        if "COMPLETE" in states:
            confirmed = None
            top = study.best_trial
            if objective == "search" and params.tune.confirm_games and not top.user_attrs.get("default"):
                keys = {k: top.params[k] for k in ("c_puct", "temperature", "temperature_moves")}
                default = next((t for t in study.trials if t.user_attrs.get("default")), None)
                base = ({k: default.params[k] for k in keys} if default is not None
                        else default_settings(params, "search").as_params())
                try:
                    confirmed = confirm_gain(params, model, TrialSettings(**keys), TrialSettings(**base),
                                             seed=seed, workers=workers)
                except KeyboardInterrupt:
                    log("confirmation interrupted; writing the study's result without it")
            best = best_params_yaml(study, out_dir / "best_params.yaml", confirmed)
    plots = save_plots(study, out_dir)
    tracker.finish(best, plots + ([out_dir / "best_params.yaml"] if best else []))
    return {"study": study_name, "storage": storage, "trials": len(states),
            "complete": states.count("COMPLETE"), "pruned": states.count("PRUNED"),
            "failed": states.count("FAIL"), "running": states.count("RUNNING"),
            "waiting": states.count("WAITING"), "best": best}
