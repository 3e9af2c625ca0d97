"""Running an Optuna study: storage, sampler and pruner, trials as nested
MLflow runs, Ctrl-C that leaves the storage consistent, and parallel jobs
sharing one study through a journal file or an RDB."""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any

from zeroloop.pipeline.params import Params
from zeroloop.pipeline.tuning.objectives import (
    default_settings,
    encode_correct,
    metric_positions,
    model_score,
    selfplay_objective_score,
    suggest,
)

#: How long a study waits for its database to come back (a restart, a failover) before it gives up.
DATABASE_WAIT_S = 60.0


def open_storage(url: str, on_lost=None):
    """An Optuna storage from a URL: ``journal:PATH`` is a journal file (safe
    for several processes on one machine); ``sqlite:///optuna.db`` for one
    process; a server database (PostgreSQL, MySQL) for many machines, opened
    so that a restart of the server is ridden out (:func:`_retrying_rdb`).

    Each records a heartbeat per running trial, so a trial whose process was
    killed is failed by the next process of the study (:mod:`.heartbeat`);
    ``on_lost(study, trial)`` is called after each such trial is failed."""
    from zeroloop.pipeline.tuning import heartbeat

    grace = storage_grace(url)
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return heartbeat.JournalHeartbeatStorage(
            JournalFileBackend(url.removeprefix("journal:")), interval=heartbeat.heartbeat_interval(),
            grace=grace, on_lost=on_lost)
    beats = heartbeat.rdb_heartbeat_kwargs(grace, on_lost)
    if url.startswith("sqlite"):
        return _past_schema_race(lambda: heartbeat.quietly(lambda: heartbeat.BeatingRDBStorage(url, **beats)))
    return _past_schema_race(lambda: heartbeat.quietly(
        lambda: _retrying_rdb()(url, engine_kwargs={"pool_pre_ping": True}, **beats)))


def _past_schema_race(make, tries: int = 5):
    """``make()``, tried again when it lost the race to create a new
    database's tables. Optuna creates them on a storage's first open without
    a lock, so of two processes (or machines) that open a new database
    together, one may find a table, or the schema's version row, made by the
    other since it looked ("table ... already exists", a unique constraint).
    The next try finds them all and writes nothing."""
    from sqlalchemy.exc import IntegrityError

    for attempt in range(1, tries):
        try:
            return make()
        except Exception as exc:
            if not (isinstance(exc, IntegrityError) or "already exists" in str(exc)):
                raise
            time.sleep(0.05 * attempt)
    return make()


def storage_grace(url: str) -> int:
    """The seconds without a heartbeat after which :func:`open_storage`'s
    storage for ``url`` counts a trial as lost: a server's restart may hold
    the heartbeats back for as long as a call is retried."""
    from zeroloop.pipeline.tuning import heartbeat

    plain = url.startswith(("journal:", "sqlite"))
    return heartbeat.grace_period(0 if plain else DATABASE_WAIT_S)


def _lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is the database connection failing,
    not a statement's own error."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, OperationalError | InterfaceError):
            return True
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _retrying_rdb():
    """Optuna's RDBStorage whose calls are tried again, for up to
    :data:`DATABASE_WAIT_S` seconds, while the connection to the database
    fails (pooled connections are checked before use, so a restarted server
    is found again). A statement's own error is raised at once. Each call is
    one transaction, so a call that failed on a lost connection did not happen."""
    import functools
    import logging

    from zeroloop.pipeline.tuning.heartbeat import BeatingRDBStorage as RDBStorage

    log = logging.getLogger("zeroloop.tuning")

    def retrying(fn):
        @functools.wraps(fn)
        def call(self, *args, **kwargs):
            import time

            deadline = time.monotonic() + DATABASE_WAIT_S
            pause = 0.5
            while True:
                try:
                    return fn(self, *args, **kwargs)
                except Exception as exc:
                    if not _lost_connection(exc) or time.monotonic() + pause > deadline:
                        raise
                    log.warning("the study's database is not answering (%s); trying again",
                                type(exc).__name__)
                    time.sleep(pause)
                    pause = min(5.0, pause * 2)
        return call

    from optuna.storages import RDBStorage as Plain

    names = [n for n, v in vars(Plain).items()
             if callable(v) and not n.startswith("_") and n not in ("remove_session", "upgrade")]
    return type("RetryingRDBStorage", (RDBStorage,), {n: retrying(getattr(RDBStorage, n)) for n in names})


#: How long a process that found the study just created waits for its creator's first trial.
FIRST_TRIAL_WAIT_S = 15.0


def open_study(study_name: str, storage: str, *, sampler=None, pruner=None, first_trial=None, on_lost=None):
    """Create or load the study, atomically across processes and machines:
    the database's uniqueness of study names decides which process creates
    it, and only that one enqueues ``first_trial`` (params, user_attrs), so
    two machines starting together try the defaults once, not twice."""
    import optuna

    backend = open_storage(storage, on_lost)
    try:
        study = optuna.create_study(study_name=study_name, storage=backend, direction="maximize",
                                    sampler=sampler, pruner=pruner)
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=study_name, storage=backend, sampler=sampler, pruner=pruner)
        created = False
    if first_trial is None:
        return study
    params, attrs = first_trial
    if created:
        study.enqueue_trial(params, user_attrs=attrs)
        return study
    # the creator enqueues right after creating: a process that loads the study in
    # between waits for that trial rather than enqueueing a second one
    deadline = time.monotonic() + FIRST_TRIAL_WAIT_S
    while not study.trials and time.monotonic() < deadline:
        time.sleep(0.2)
    if not study.trials:  # the creator stopped before it could enqueue
        study.enqueue_trial(params, user_attrs=attrs, skip_if_exists=True)
    return study


def run_search_study(params: Params, *, model: str | None, trials: int, study_name: str, storage: str,
                     seed: int = 0, workers: int | None = None, tracker=None, objective: str = "search",
                     progress: bool = True, sampler_seed: int | None = None,
                     timeout: float | None = None) -> Any:
    """Run (or resume) a study; returns the optuna Study. ``objective``:
    ``search`` (``model`` under the sampled settings) or ``selfplay`` (a short
    training run per trial, in a temporary directory). ``timeout``: seconds
    after which no further trial starts (the running one finishes), so
    ``trials`` is then an upper bound.

    A trial that raises is recorded as failed (in Optuna and MLflow) and the
    study goes on.
    """
    import optuna

    if objective == "selfplay" and params.tune.pruner == "wilcoxon":
        raise ValueError("tune.pruner: wilcoxon pairs the per-round scores of the search objective; "
                         "use median (or none) with --objective selfplay")
    # Optuna's warning for a failed trial carries a whole traceback; the trial's line below says why
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    # steps: the rounds 0..rounds-1 of the search objective, the generations 1..G of selfplay
    steps = params.tune.selfplay_generations if objective == "selfplay" else params.tune.rounds
    pruner = {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=1),
              "hyperband": lambda: optuna.pruners.HyperbandPruner(
                  min_resource=1, max_resource=max(steps, 2), reduction_factor=3),
              "wilcoxon": lambda: optuna.pruners.WilcoxonPruner(p_threshold=0.1),
              "none": optuna.pruners.NopPruner}[params.tune.pruner]()
    # the current settings go first, on the same openings: the gain of the best is measured against them
    sampler = optuna.samplers.TPESampler(seed=seed if sampler_seed is None else sampler_seed)
    from tqdm import tqdm

    from zeroloop.pipeline.tuning.heartbeat import lost_line, lost_reason

    grace = storage_grace(storage)

    def lost(study, trial) -> None:  # another process's trial whose heartbeat stopped, failed just now
        if tracker is not None:
            tracker.lost(trial, lost_reason(grace))
        tqdm.write(lost_line(trial.number, grace), file=sys.stderr)

    study = open_study(study_name, storage, pruner=pruner, sampler=sampler, on_lost=lost,
                       first_trial=(default_settings(params, objective).as_params(), {"default": True}))
    positions = metric_positions(params, seed) if params.tune.metric in ("solver", "validation") else None
    study.set_user_attr("objective", objective)
    if objective == "selfplay":  # what the full run's games scale from when simulations are tuned
        study.set_user_attr("selfplay_games", params.selfplay.games)
        study.set_user_attr("selfplay_simulations", params.mcts.simulations)
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
            # a selfplay trial that has trained every generation has spent its budget: its score
            # is final, and pruning it then would only throw the result away
            last = objective == "selfplay" and step >= steps
            if not last and trial.should_prune():
                raise optuna.TrialPruned()

        def keep(correct) -> None:  # metric solver / validation: pairs trials position by position
            trial.set_user_attr("correct", encode_correct(correct))

        try:
            with interrupts.live():  # Ctrl-C stops the games at once, not the bookkeeping around them
                if objective == "selfplay":
                    import tempfile

                    with tempfile.TemporaryDirectory(prefix=f"zeroloop-trial{trial.number}-") as tmp:
                        score = selfplay_objective_score(params, settings, tmp, seed=seed, report=report,
                                                         workers=workers, keep=keep)
                else:
                    score = model_score(params, model, settings, seed=seed, report=report,
                                        workers=workers, positions=positions, keep=keep)
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

    bar = tqdm(total=trials, desc=f"study {study_name}", unit="trial", disable=not progress,
               dynamic_ncols=True)

    def after_trial(study, trial) -> None:
        shown = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in trial.params.items())
        result = f"{trial.value:.3f}" if trial.value is not None else trial.state.name.lower()
        if trial.state.name == "FAIL":
            reason = (trial.system_attrs.get("fail_reason") or "").strip().splitlines()
            result = f"failed ({reason[0][:200]})" if reason else "failed"
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
        if tracker is not None and tracker.unsent:  # runs the tracking store refused before: again
            tracker.flush()
        interrupts.check()  # a Ctrl-C during the bookkeeping stops the study here, with the trial stored

    try:
        with interrupts.installed():
            # no full collection after each trial (Optuna's gc_after_trial): it scanned every object
            # torch, Lightning and MLflow import (about 540k, 0.6-0.8 CPU-s a trial on a Zen 3) to free
            # what the collector frees on its own
            study.optimize(evaluate_trial, n_trials=trials, timeout=timeout, catch=(Exception,),
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


#: Set when SIGTERM stopped this process (see :func:`stop_on_sigterm`).
TERMINATED = threading.Event()


def stop_on_sigterm() -> None:
    """SIGTERM (``kill``, ``timeout``, a CI cancel) stops a study as Ctrl-C
    does: the trial in progress is stored as failed and the MLflow runs are
    ended, nothing is left RUNNING."""
    import signal

    def handler(signum, frame):
        TERMINATED.set()
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


class _Interrupts:
    """SIGINT or SIGTERM while a study runs: immediate inside the games (``live``),
    deferred elsewhere, so that Optuna's and MLflow's records of a trial are
    never cut in half; a deferred one is raised at the next ``check`` or
    ``live``."""

    def __init__(self) -> None:
        self.immediate = False
        self.pending = False

    def _handler(self, signum, frame) -> None:
        import signal

        if signum == signal.SIGTERM:
            TERMINATED.set()
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

        if threading.current_thread() is not threading.main_thread():
            self.immediate = True  # signals go to the main thread only; nothing to defer here
            yield
            return
        previous = {sig: signal.signal(sig, self._handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.check()


def check_shared_storage(storage: str, jobs: int) -> None:
    if jobs > 1 and storage.startswith("sqlite"):
        raise ValueError("--jobs > 1 needs a storage several processes can share: "
                         "--storage journal:optuna.journal (one machine) or a PostgreSQL URL")


def parallel_search_study(params_file: str, *, model: str | None, trials: int, study_name: str,
                          storage: str, seed: int, jobs: int, objective: str = "search",
                          timeout: float | None = None) -> None:
    """Run ``jobs`` processes that share one study through ``storage`` (not
    SQLite); each runs its share of ``trials`` with cores/jobs match workers.
    On the Ray backend the jobs' games are Ray tasks on the cluster the parent
    joined, and each job gets the cluster's CPUs / jobs."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from zeroloop.pipeline.runtime.backend import current_backend
    from zeroloop.pipeline.runtime.workers import default_workers

    check_shared_storage(storage, jobs)
    shares = [trials // jobs + (i < trials % jobs) for i in range(jobs)]
    per_job = max(1, default_workers() // jobs)
    backend = current_backend()
    if backend.kind == "ray":  # the jobs join the very cluster this process joined (or started)
        import dataclasses

        import ray

        backend = dataclasses.replace(backend, address=ray.get_runtime_context().gcs_address)
    ex = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"))
    try:
        # the same seed (openings, positions) for every job; its own sampler seed each
        futures = [ex.submit(_study_job, params_file, model, n, study_name, storage, seed, seed + i,
                             per_job, objective, backend, timeout)
                   for i, n in enumerate(shares) if n]
        for f in futures:
            f.result()
    except KeyboardInterrupt:
        if TERMINATED.is_set():  # SIGTERM reached this process only (Ctrl-C reaches the whole group)
            import signal

            for proc in list((getattr(ex, "_processes", None) or {}).values()):
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGTERM)
        ex.shutdown(wait=True, cancel_futures=True)  # each job stores its trial's end first
        raise
    ex.shutdown()


def _study_job(params_file: str, model: str | None, trials: int, study_name: str, storage: str,
               seed: int, sampler_seed: int, workers: int, objective: str, backend=None,
               timeout: float | None = None) -> None:
    from zeroloop.pipeline.params import load_params
    from zeroloop.pipeline.runtime.backend import use_backend
    from zeroloop.pipeline.runtime.process import setup_process
    from zeroloop.pipeline.runtime.workers import keep_workers
    from zeroloop.pipeline.tuning.tracker import StudyTracker

    setup_process()
    if backend is not None:
        use_backend(backend)
    params = load_params(params_file)
    tracker = StudyTracker.open(params, study_name, storage, {"objective": objective})
    with keep_workers():  # one set of worker processes for all this job's trials
        run_search_study(params, model=model, trials=trials, study_name=study_name, storage=storage,
                         seed=seed, workers=workers, tracker=tracker, objective=objective, progress=False,
                         sampler_seed=sampler_seed, timeout=timeout)
