"""The pipeline's MLflow runs: its parent run, one nested run per generation,
summary metrics stepped by generation, artifacts and the champion model
(where the store is and whether it answers: :mod:`~zeroloop.pipeline.tracking.store`).

Finding the parent run from separate stage processes: every stage computes
the *pipeline key*, a hash of the result-relevant params (everything except
``generations``, ``runtime`` and ``mlflow``), and looks up the run tagged
``zeroloop.pipeline_key=<key>`` in the experiment, creating it when absent.
So all stages of one configuration meet in one parent run, appended
generations join it, and ``dvc exp run -S mcts.c_puct=2.0`` (another key)
gets a run of its own. Generation runs are found by their parent and the tag
``zeroloop.generation``.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zeroloop.pipeline.data.layout import Layout
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.tracking.store import (
    bound_http_retries,
    failure_line,
    open_experiment,
    repo_root,
    tracking_errors,
    tracking_uri,
)

PIPELINE_KEY = "zeroloop.pipeline_key"
GENERATION = "zeroloop.generation"
PARENT = "mlflow.parentRunId"
ALIAS = "champion"


@contextmanager
def logging_after_work(stage: str, what: str):
    """Around a stage's logging, once its outputs are written: the tracking
    store failing here (it went away mid-stage) costs the log, not the work.
    One line says what was not logged; the stage still succeeds, and the next
    stage that reaches the store logs the generation's metrics from the
    reports (:meth:`Tracker.complete_generation`)."""
    try:
        yield
    except tracking_errors() as exc:
        if os.environ.get("ZEROLOOP_DEBUG"):
            raise
        first = failure_line(exc)
        print(f"[{stage}] warning: MLflow at {tracking_uri()} failed ({first}); {what} not logged. "
              "The outputs are written; the next stage that reaches the store logs the metrics from "
              "the reports", file=sys.stderr, flush=True)


#: the generation run's param: the precision its self-play ran in (``runtime.precision`` resolved)
RESOLVED = "runtime.precision_resolved"


def source_tags() -> dict[str, str]:
    """Where the code came from, as the MLflow UI's Source and Version columns read it.

    ``mlflow.source.name``: the repository's ``origin`` remote without
    ``.git`` (``mlflow.source.git.repoURL`` holds it as git gives it;
    credentials in it are dropped), else the repository's path; the Source
    column shows its last part, a GitHub or GitLab remote as a link.
    ``mlflow.source.type``: LOCAL. In git, the commit the code ran at
    (``mlflow.source.git.commit``, the Version column), the branch, and a
    ``zeroloop.git_dirty`` flag when tracked files had changes."""
    import re
    import subprocess

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    # a remote like https://user:token@host/... must not put the token into every run
    remote = re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", git("remote", "get-url", "origin") or "",
                    flags=re.I)
    tags = {"mlflow.source.name": remote.removesuffix(".git") or str(repo_root()),
            "mlflow.source.type": "LOCAL"}
    if remote:
        tags["mlflow.source.git.repoURL"] = remote
    commit = git("rev-parse", "HEAD")
    if not commit:
        return tags
    tags["mlflow.source.git.commit"] = commit
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        tags["mlflow.source.git.branch"] = branch
    dirty = git("status", "--porcelain", "--untracked-files=no")
    tags["zeroloop.git_dirty"] = "true" if dirty else "false"
    return tags


class Tracker:
    """Logging for one pipeline configuration. Use ``with Tracker.open(params) as t``."""

    def __init__(self, params: Params, client, experiment_id: str, parent_id: str) -> None:
        self.params, self.client = params, client
        self.experiment_id, self.parent_id = experiment_id, parent_id
        self._gen_runs: dict[int, str] = {}

    @classmethod
    def open(cls, params: Params) -> Tracker:
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        bound_http_retries()
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.ERROR)  # after import: mlflow resets it
        client = MlflowClient(tracking_uri())
        exp_id = open_experiment(client, params.mlflow.experiment)
        key = params.fingerprint()
        found = client.search_runs([exp_id], filter_string=f"tags.`{PIPELINE_KEY}` = '{key}'",
                                   order_by=["attributes.start_time ASC"], max_results=1)
        if found:
            parent = found[0].info.run_id
            client.update_run(parent, status="RUNNING")  # back to FINISHED when the stage ends
        else:
            exp_name = os.environ.get("DVC_EXP_NAME")
            tags = {PIPELINE_KEY: key, "zeroloop.game": params.game, **source_tags(),
                    "mlflow.note.content": f"zeroloop pipeline, {params.game}, params key {key}"}
            if exp_name:
                tags["dvc.exp_name"] = exp_name
            if os.environ.get("DVC_EXP_BASELINE_REV"):
                tags["dvc.baseline_rev"] = os.environ["DVC_EXP_BASELINE_REV"]
            run = client.create_run(exp_id, run_name=exp_name or f"{params.game}-{key[:8]}", tags=tags)
            parent = run.info.run_id
            log_batch(client, parent, params={k: v for k, v in params.flat().items()})
        return cls(params, client, exp_id, parent)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        status = "FINISHED" if exc[0] is None else "FAILED"
        for run_id in self._gen_runs.values():
            self.client.set_terminated(run_id, status)
        # a parent is RUNNING only while one of its stages runs: a configuration that never
        # reaches `report` is not left RUNNING for ever
        self.client.set_terminated(self.parent_id, status)

    def log_stage(self, gen: int, stage: str, report: dict[str, Any], layout: Layout) -> None:
        """A generation stage's metrics, from its report, into the generation's
        run; the reports of the stages before it (DVC may have restored them
        from its cache without running them) fill in what the run lacks."""
        log_batch(self.client, self.generation_run_id(gen), metrics=stage_metrics(stage, report))
        self.complete_generation(gen, layout, upto=stage)

    def complete_generation(self, gen: int, layout: Layout, upto: str | None = None) -> None:
        """Log every metric of the generation's report files (up to and
        including stage ``upto``; all when None) that its run does not have yet,
        so the run mirrors the outputs DVC holds."""
        from zeroloop.pipeline.data.storage import read_json

        run_id = self.generation_run_id(gen)
        data = self.client.get_run(run_id).data
        stages = GENERATION_STAGES[:GENERATION_STAGES.index(upto) + 1] if upto else GENERATION_STAGES
        missing: dict[str, float] = {}
        tags: dict[str, str] = {}
        params: dict[str, str] = {}
        for stage in stages:
            path = layout.report(gen, STAGE_REPORTS[stage])
            if path.exists():
                report = read_json(path)
                logged = stage_metrics(stage, report)
                missing.update({k: v for k, v in logged.items() if k not in data.metrics})
                where = report.get("machine") if isinstance(report.get("machine"), dict) else {}
                tags.update({f"{stage}.{k}": str(v) for k, v in where.items()
                             if data.tags.get(f"{stage}.{k}") != str(v)})
                if stage == "selfplay" and where.get("precision") and RESOLVED not in data.params:
                    # what runtime.precision (auto) was on the machine that played the games; a param is
                    # written once, the tags above follow a rerun elsewhere
                    params[RESOLVED] = where["precision"]
        log_batch(self.client, run_id, metrics=missing, params=params, tags=tags)

    def fresh_generation_run(self, gen: int, layout: Layout, stage: str) -> None:
        """A rerun of ``stage`` whose step-wise metrics (Lightning's curves) are
        already in the generation's run: that run is deleted and a new one
        starts, filled in from the reports of the stages before ``stage``, so a
        rerun replaces its curves rather than mixing two runs' steps."""
        run_id = self.generation_run_id(gen)
        if not any(k.startswith(f"{stage}/") for k in self.client.get_run(run_id).data.metrics):
            return
        self.client.delete_run(run_id)
        self._gen_runs.pop(gen)
        before = GENERATION_STAGES[:GENERATION_STAGES.index(stage)]
        if before:
            self.complete_generation(gen, layout, upto=before[-1])

    def generation_run_id(self, gen: int) -> str:
        if gen not in self._gen_runs:
            found = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`{PARENT}` = '{self.parent_id}' and tags.`{GENERATION}` = '{gen}'",
                max_results=1)
            if found:
                self._gen_runs[gen] = found[0].info.run_id
            else:
                run = self.client.create_run(self.experiment_id, run_name=f"gen-{gen}",
                                             tags={PARENT: self.parent_id, GENERATION: str(gen),
                                                   PIPELINE_KEY: self.params.fingerprint()})
                self._gen_runs[gen] = run.info.run_id
        return self._gen_runs[gen]

    def log_summary(self, metrics: dict[str, float], step: int = 0) -> None:
        """Metrics on the parent run; ``step`` = generation, so the UI charts them."""
        log_batch(self.client, self.parent_id, metrics=metrics, step=step)

    def log_text(self, gen: int | None, text: str, name: str) -> None:
        run = self.parent_id if gen is None else self.generation_run_id(gen)
        self.client.log_text(run, text, name)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None,
                     gen: int | None = None) -> None:
        run = self.parent_id if gen is None else self.generation_run_id(gen)
        self.client.log_artifact(run, str(path), artifact_path)

    def lightning_logger(self, gen: int, stage: str = "train"):
        """Lightning's MLFlowLogger writing into the generation's run. A
        failing store mid-training costs curve points, not the training: the
        first failure is reported in one line and later points are dropped."""
        from lightning.pytorch.loggers import MLFlowLogger

        errors = tracking_errors()

        class TolerantLogger(MLFlowLogger):
            failed = False

            def _guard(self, fn, *args, **kwargs):
                if self.failed:
                    return None
                try:
                    return fn(*args, **kwargs)
                except errors as exc:
                    if os.environ.get("ZEROLOOP_DEBUG"):
                        raise
                    self.failed = True
                    first = failure_line(exc)
                    print(f"[{stage}@{gen}] warning: MLflow at {tracking_uri()} failed ({first}); the rest "
                          "of the training curves is not logged, training goes on", file=sys.stderr,
                          flush=True)
                    return None

            def log_metrics(self, metrics, step=None):
                return self._guard(super().log_metrics, metrics, step)

            def log_hyperparams(self, params):
                return self._guard(super().log_hyperparams, params)

            def finalize(self, status="success"):
                return self._guard(super().finalize, status)

        return TolerantLogger(tracking_uri=tracking_uri(), run_id=self.generation_run_id(gen))

    def register_champion(self, model_file: str | Path, card: dict[str, Any],
                          tags: dict[str, str]) -> str | None:
        """Log the champion model file on the parent run as an MLflow model (a
        pyfunc over the file that searches as the evaluation does, ``card`` in
        its MLmodel's metadata: :mod:`.champion_model`) and register it as a
        new version of the model with the alias ``champion``, tagged with
        ``tags`` (what champions are compared by), the parent run's git commit
        and the params fingerprint. Returns the version; None, said in one
        line, when the model could not be logged (the stage's files are
        written by then)."""
        import json

        from mlflow.exceptions import MlflowException
        from mlflow.utils.mlflow_tags import MLFLOW_MODEL_VERSIONS

        from zeroloop.pipeline.tracking.champion_model import global_tracking_uri, log_champion_model

        p = self.params
        name = p.registered_model_name()
        about = (f"zeroloop {p.game} champion: an MLflow model (pyfunc) over a zeroloop model file; "
                 f"mlflow.pyfunc.load_model('models:/{name}@{ALIAS}').predict(positions)")
        commit = self.client.get_run(self.parent_id).data.tags.get("mlflow.source.git.commit")
        tags = {**tags, **({"git_commit": commit} if commit else {}), PIPELINE_KEY: p.fingerprint()}
        with global_tracking_uri(tracking_uri()):
            try:
                info = log_champion_model(self.parent_id, model_file, p.match_search(p.evaluate),
                                          p.runtime.precision, card)
            except Exception as exc:  # the work is done: a log that fails costs the log only
                if os.environ.get("ZEROLOOP_DEBUG"):
                    raise
                print(f"[report] warning: the champion was not logged as an MLflow model at {tracking_uri()} "
                      f"({failure_line(exc)}), so not registered; {model_file} is written", file=sys.stderr,
                      flush=True)
                return None
            try:
                self.client.create_registered_model(name, description=about)
            except MlflowException:  # already registered (an older zeroloop's description said otherwise)
                self.client.update_registered_model(name, description=about)
            mv = self.client.create_model_version(name, source=info.model_uri, run_id=self.parent_id,
                                                  model_id=info.model_id, tags=tags)
            # the logged model's page names its version, as mlflow.register_model leaves it (minus its lines)
            self.client.set_logged_model_tags(info.model_id, {MLFLOW_MODEL_VERSIONS: json.dumps(
                [{"name": name, "version": mv.version}])})
            self.client.set_registered_model_alias(name, ALIAS, mv.version)
        return str(mv.version)

    def finish(self) -> None:
        self.client.set_terminated(self.parent_id, "FINISHED")


#: A generation's stages in chain order, and the report each writes (reports/generations/gen_g/NAME.json).
GENERATION_STAGES = ("selfplay", "train", "gate", "evaluate")
STAGE_REPORTS = {"selfplay": "selfplay", "train": "train", "gate": "gate", "evaluate": "eval"}


def stage_metrics(stage: str, report: dict[str, Any]) -> dict[str, float]:
    """The metrics a generation stage's report gives its MLflow run: numbers
    as ``stage/key`` (evaluation: ``eval/vs_X_score`` and the solver errors)."""
    if stage == "evaluate":
        out = {f"eval/{k}_score": v["score"] for k, v in report.items()
               if isinstance(v, dict) and "score" in v}
        solver = report.get("solver", {})
        out.update({f"eval/{k}": v for k, v in solver.items() if isinstance(v, int | float)})
        for group, rates in solver.get("groups", {}).items():  # eval/begin-hard/search_error_rate, ...
            out.update({f"eval/{group}/{k}": v for k, v in rates.items() if k.endswith("_error_rate")})
        out.update({f"eval/{k}": report[k] for k in ("wall_s", "stage_wall_s", "stage_cpu_s") if k in report})
        return out
    return {f"{stage}/{k}": v for k, v in report.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "generation"}


def log_batch(client, run_id: str, *, metrics: dict[str, float] | None = None,
              params: dict[str, Any] | None = None, tags: dict[str, str] | None = None,
              step: int = 0) -> None:
    from mlflow.entities import Metric, Param, RunTag

    now = int(time.time() * 1000)
    ms = [Metric(k, float(v), now, step) for k, v in (metrics or {}).items() if v is not None]
    ps = [Param(k, str(v)) for k, v in (params or {}).items()]
    ts = [RunTag(k, v) for k, v in (tags or {}).items()]
    for i in range(0, max(len(ms), len(ps), len(ts)), 100):  # MLflow's batch limits (tags: 100)
        client.log_batch(run_id, metrics=ms[i:i + 100], params=ps[i:i + 100], tags=ts[i:i + 100])


def set_tags(client, run_id: str, tags: dict[str, str]) -> None:
    """Tags on a run that other processes may tag at the same moment (every
    machine of a shared study ends it by tagging the study's run). Through
    MLflow's batch call, whose store retries an insert that lost the race
    for a new key; ``MlflowClient.set_tag`` does not, and on a PostgreSQL
    store the loser failed with a unique violation on ``tag_pk``."""
    log_batch(client, run_id, tags=tags)


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level, keys joined with dots."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
