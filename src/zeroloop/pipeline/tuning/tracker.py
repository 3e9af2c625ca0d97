"""The Optuna study's MLflow record: a parent run per study, found again
by its name and storage when the study resumes, with one nested run per trial."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from zeroloop.pipeline.params import Params
from zeroloop.pipeline.tracking.runs import PARENT, flatten, log_batch, set_tags, source_tags
from zeroloop.pipeline.tracking.store import (
    bound_http_retries,
    failure_line,
    open_experiment,
    tracking_errors,
    tracking_uri,
)

STUDY_TAG = "zeroloop.study"
STORAGE_TAG = "optuna.storage"


class TrialRun:
    """One Optuna trial's nested MLflow run.

    The tracking store failing (a server or database restart) costs the trial
    nothing: what could not be sent (the run itself, its parameters, scores,
    its end) is kept and sent at the next call, after the next trial, or at the
    end of the study (:meth:`StudyTracker.flush`). A retry first looks for
    the trial's run (a creation whose answer was lost, or one a resumed study
    wrote from Optuna's record), so a trial never gets two.
    """

    def __init__(self, tracker: StudyTracker, number: int, params: dict[str, Any],
                 tags: dict[str, str] | None = None, run_id: str | None = None) -> None:
        self.tracker, self.number = tracker, number
        self.client = tracker.client
        self.run_id = run_id
        self._batch: dict[str, dict] | None = {"params": dict(params), "tags": dict(tags or {})}
        self._metrics: list[tuple[dict[str, float], int]] = []
        self._end: tuple[str, str | None] | None = None
        self.failure: str | None = None  # the store's last refusal, while something is unsent
        self.flush()

    def flush(self) -> bool:
        """Send what is unsent; True when nothing is left. A tracking error is
        kept (:attr:`failure`), never raised."""
        try:
            if self.run_id is None:
                self.run_id = self._find() or self._create()
            if self._batch is not None:
                log_batch(self.client, self.run_id, **self._batch)
                self._batch = None
            while self._metrics:
                metrics, step = self._metrics[0]
                log_batch(self.client, self.run_id, metrics=metrics, step=step)
                self._metrics.pop(0)
            if self._end is not None:
                state, error = self._end
                ending = {"optuna.state": state, **({"error": error[:5000]} if error else {})}
                set_tags(self.client, self.run_id, ending)
                status = {"FAILED": "FAILED", "INTERRUPTED": "KILLED"}.get(state, "FINISHED")
                self.client.set_terminated(self.run_id, status)
                self._end = None
        except tracking_errors() as exc:
            self.failure = failure_line(exc)
            return False
        self.failure = None
        return True

    def _find(self) -> str | None:
        if self.failure is None:  # first try: nothing can be there yet
            return None
        found = self.tracker.trial_runs(self.number).get(self.number)
        return found.info.run_id if found is not None else None

    def _create(self) -> str:
        tags = {PARENT: self.tracker.parent_id, "optuna.trial": str(self.number)}
        return self.client.create_run(self.tracker.experiment_id, run_name=f"trial-{self.number}",
                                      tags=tags).info.run_id

    def log(self, metrics: dict[str, float], step: int | None) -> None:
        self._metrics.append((metrics, step or 0))
        if self.failure is None:  # while the store fails, the next try waits for the trial's end
            self.flush()

    def end(self, state: str, error: str | None = None) -> None:
        """state: COMPLETE, PRUNED, FAILED (Optuna's words, kept as a tag) or
        INTERRUPTED (Ctrl-C; Optuna records that trial as failed)."""
        self._end = (state, error)
        self.tracker.open_trials.pop(self.number, None)
        if not self.flush():
            self.tracker.unsent.append(self)
            print(f"warning: MLflow at {tracking_uri()} failed ({self.failure}); trial {self.number}'s run "
                  "is kept and sent after the next trial or at the end of the study", file=sys.stderr,
                  flush=True)


def storage_key(url: str) -> str:
    """An Optuna storage URL that names one storage wherever it is used from:
    file paths (sqlite, journal) made absolute, a password left out."""
    if url.startswith("journal:"):
        return "journal:" + os.path.abspath(url.removeprefix("journal:"))
    if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(url.removeprefix("sqlite:///"))
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        creds, host = rest.split("@", 1)
        return f"{scheme}://{creds.split(':', 1)[0]}@{host}"
    return url


class StudyTracker:
    """An MLflow parent run per Optuna study (found by the tag ``zeroloop.study``)
    with one nested run per trial."""

    def __init__(self, client, experiment_id: str, parent_id: str) -> None:
        self.client, self.experiment_id, self.parent_id = client, experiment_id, parent_id
        self.open_trials: dict[int, TrialRun] = {}  # trial runs this process started and has not ended
        self.unsent: list[TrialRun] = []  # ended trials whose run the store did not take yet

    @classmethod
    def open(cls, params: Params, study_name: str, storage: str, extra: dict[str, Any]) -> StudyTracker:
        import time

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.ERROR)
        bound_http_retries()
        client = MlflowClient(tracking_uri())
        exp_id = open_experiment(client, params.mlflow.experiment)
        where = storage_key(storage)  # the same study name in another storage is another study
        query = f"tags.`{STUDY_TAG}` = '{study_name}' and tags.`{STORAGE_TAG}` = '{where}'"
        oldest = ["attributes.start_time ASC"]  # ties: MLflow orders by run id next
        found = client.search_runs([exp_id], filter_string=query, order_by=oldest, max_results=1)
        if found:  # a resumed study: its trials go on under the same parent run
            parent = found[0].info.run_id
            client.update_run(parent, status="RUNNING")
            return cls(client, exp_id, parent)
        mine = client.create_run(exp_id, run_name=f"tune-{study_name}",
                                 tags={STUDY_TAG: study_name, STORAGE_TAG: where,
                                       "zeroloop.game": params.game, **source_tags()}).info.run_id
        # machines that start one study together each created a parent: after a moment in which
        # every creation is visible, all keep the oldest and the others delete their own (a sqlite
        # study has one process: parallel jobs need a journal or a database server)
        if not where.startswith("sqlite:"):
            time.sleep(1.0)
        parent = client.search_runs([exp_id], filter_string=query, order_by=oldest,
                                    max_results=1)[0].info.run_id
        if parent != mine:
            client.delete_run(mine)
            client.update_run(parent, status="RUNNING")
        else:
            flat = {f"tune.{k}": v for k, v in flatten(params.tune.model_dump()).items()}
            log_batch(client, parent, params={**flat, **extra, "game": params.game})
        return cls(client, exp_id, parent)

    def trial_run(self, number: int, params: dict[str, Any]) -> TrialRun:
        trial = TrialRun(self, number, params)
        self.open_trials[number] = trial
        return trial

    def trial_runs(self, number: int | None = None) -> dict[int, Any]:
        """The study's trial runs in the store, by trial number (the oldest
        where one has two); ``number``: that trial's only."""
        query = f"tags.`{PARENT}` = '{self.parent_id}'"
        if number is not None:
            query += f" and tags.`optuna.trial` = '{number}'"
        runs: dict[int, Any] = {}
        token = None
        while True:
            page = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1000,
                                           order_by=["attributes.start_time DESC"], page_token=token)
            for r in page:
                if "optuna.trial" in r.data.tags:
                    runs[int(r.data.tags["optuna.trial"])] = r
            token = page.token
            if not token:
                return runs

    def backfill(self, trials: list, reason: str | None = None, *, overrule: bool = False) -> list[int]:
        """A resumed study: those of its ``trials`` (Optuna's) that are
        finished but whose run is missing or never ended (their process could
        not reach the store before it went away) get it written from Optuna's
        record, tagged ``zeroloop.backfilled``. Returns their numbers.
        ``reason``: a failed trial's error when Optuna's record has none.
        ``overrule``: a run that ended in another state than Optuna's is ended
        again in Optuna's (its process died between ending the run and Optuna
        storing the result, so Optuna failed a trial whose run says COMPLETE)."""
        finished = [t for t in trials if t.state.is_finished()]
        have = self.trial_runs() if finished else {}
        done = []
        for t in finished:
            old = have.get(t.number)
            state = {"COMPLETE": "COMPLETE", "PRUNED": "PRUNED"}.get(t.state.name, "FAILED")
            ended = old.data.tags.get("optuna.state") if old is not None else None
            if ended is not None and (not overrule or ended == state):
                continue
            # a run that exists took its parameters when it was created
            run = TrialRun(self, t.number, t.params if old is None else {},
                           tags={"zeroloop.backfilled": "from the Optuna storage"},
                           run_id=old.info.run_id if old is not None else None)
            if t.value is not None:
                run.log({"final_score": t.value}, None)
            why = t.system_attrs.get("fail_reason") or reason
            if ended is not None:
                why = (f"{why or 'failed in Optuna'} (its run had ended {ended} before Optuna stored "
                       "the result)")
            run.end(state, error=why if state == "FAILED" else None)
            done.append(t.number)
        return done

    def lost(self, trial, reason: str) -> None:
        """A trial Optuna failed because its process stopped beating (killed,
        its machine lost): its run, open since, ends FAILED with ``reason``
        (or is written whole, when the process never sent it). The store
        failing costs the study nothing: the next run's backfill ends it."""
        try:
            self.backfill([trial], reason, overrule=True)
        except tracking_errors() as exc:
            print(f"warning: MLflow at {tracking_uri()} failed ({failure_line(exc)}); trial {trial.number}'s "
                  "run is ended by the study's next run", file=sys.stderr, flush=True)

    def flush(self) -> list[int]:
        """Send the runs of ended trials that the store did not take before;
        returns the numbers of those still unsent."""
        self.unsent = [t for t in self.unsent if not t.flush()]
        return [t.number for t in self.unsent]

    def end_open_trials(self) -> None:
        """Ctrl-C: this process's trial runs that are still open are marked KILLED."""
        for trial in list(self.open_trials.values()):
            trial.end("INTERRUPTED", error="KeyboardInterrupt")

    def interrupted(self) -> None:
        self.end_open_trials()
        self.client.set_terminated(self.parent_id, "KILLED")

    def finish(self, best: dict[str, Any] | None, artifacts: list[Path]) -> None:
        left = self.flush()
        if left:
            print(f"warning: MLflow at {tracking_uri()} failed ({self.unsent[0].failure}); the runs of "
                  f"trials {', '.join(map(str, left))} are not logged. The Optuna storage holds them: "
                  "the next zeroloop tune of this study writes them", file=sys.stderr, flush=True)
        if best:
            metrics = {"best_score": best["score"], "default_score": best.get("default_score"),
                       "gain": best.get("gain")}
            if best.get("confirmed"):
                c = best["confirmed"]
                metrics.update({"confirmed_best_score": c["best_score"],
                                "confirmed_default_score": c["default_score"], "confirmed_gain": c["gain"],
                                "confirmed_gain_ci95_low": c["gain_ci95"][0],
                                "confirmed_gain_ci95_high": c["gain_ci95"][1]})
            log_batch(self.client, self.parent_id, metrics=metrics)
            set_tags(self.client, self.parent_id, {"best_trial": str(best["trial"])})
        for path in artifacts:
            self.client.log_artifact(self.parent_id, str(path), "tuning")
        self.client.set_terminated(self.parent_id, "FINISHED")
