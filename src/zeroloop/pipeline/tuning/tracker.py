"""The Optuna study's MLflow record: a parent run per study, found again
by its name and storage when the study resumes, with one nested run per trial."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from zeroloop.pipeline.params import Params
from zeroloop.pipeline.tracking import (
    PARENT,
    bound_http_retries,
    flatten,
    log_batch,
    open_experiment,
    source_tags,
    tracking_uri,
)

STUDY_TAG = "zeroloop.study"
STORAGE_TAG = "optuna.storage"


class TrialRun:
    """One Optuna trial's nested MLflow run."""

    def __init__(self, client, run_id: str, on_end=None) -> None:
        self.client, self.run_id, self._on_end = client, run_id, on_end

    def log(self, metrics: dict[str, float], step: int | None) -> None:
        log_batch(self.client, self.run_id, metrics=metrics, step=step or 0)

    def end(self, state: str, error: str | None = None) -> None:
        """state: COMPLETE, PRUNED, FAILED (Optuna's words, kept as a tag) or
        INTERRUPTED (Ctrl-C; Optuna records that trial as failed)."""
        self.client.set_tag(self.run_id, "optuna.state", state)
        if error:
            self.client.set_tag(self.run_id, "error", error[:5000])
        status = {"FAILED": "FAILED", "INTERRUPTED": "KILLED"}.get(state, "FINISHED")
        self.client.set_terminated(self.run_id, status)
        if self._on_end is not None:
            self._on_end(self.run_id)


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
        self.open_trials: dict[str, TrialRun] = {}  # trial runs this process started and has not ended

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
        # every creation is visible, all keep the oldest and the others delete their own
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
        run = self.client.create_run(self.experiment_id, run_name=f"trial-{number}",
                                     tags={PARENT: self.parent_id, "optuna.trial": str(number)})
        trial = TrialRun(self.client, run.info.run_id, on_end=lambda rid: self.open_trials.pop(rid, None))
        self.open_trials[run.info.run_id] = trial
        log_batch(self.client, run.info.run_id, params=params)
        return trial

    def end_open_trials(self) -> None:
        """Ctrl-C: this process's trial runs that are still open are marked KILLED."""
        for trial in list(self.open_trials.values()):
            trial.end("INTERRUPTED", error="KeyboardInterrupt")

    def interrupted(self) -> None:
        self.end_open_trials()
        self.client.set_terminated(self.parent_id, "KILLED")

    def finish(self, best: dict[str, Any] | None, artifacts: list[Path]) -> None:
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
            self.client.set_tag(self.parent_id, "best_trial", str(best["trial"]))
        for path in artifacts:
            self.client.log_artifact(self.parent_id, str(path), "tuning")
        self.client.set_terminated(self.parent_id, "FINISHED")
