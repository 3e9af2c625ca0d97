"""Reaching the MLflow store: where it is, and whether it answers.

The store: ``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<root>/mlflow.db``
with artifacts in ``<root>/mlartifacts``. ``<root>`` is ``$DVC_ROOT``: DVC
sets it to the main repository even while ``dvc exp run --temp`` or
``--queue`` runs the stages in a temporary copy, so experiments land in the
same store as ``dvc repro``. Outside DVC it is the current directory.

A stage checks the store before any work (:func:`check_tracking`: a server
that answers, with the credentials; a sqlite file that is a database), bounds
MLflow's HTTP retries, imports MLflow's client while it works
(:func:`prefetch_client`), and opens the experiment (:func:`open_experiment`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def repo_root() -> Path:
    """The repository whose ``mlflow.db`` and ``mlartifacts/`` a stage logs to.
    ``dvc exp run --temp`` and queued experiments run in a copy under
    ``<repo>/.dvc/tmp/exps/``, which DVC deletes afterwards: they log to the
    repository's own store, so every experiment keeps its MLflow run."""
    root = Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()
    parts = root.parts
    for i in range(len(parts) - 2):
        if parts[i:i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    return root


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


#: MLflow's HTTP retries, bounded. Its own defaults (7 retries, backoff factor 2, 120 s a request)
#: wait minutes on a server that is down before they fail; these ride out a server or database
#: restart of ~10 s and give up within about a minute. Variables the user sets win.
HTTP_RETRIES = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
#: How long a stage waits for the tracking store before any work (``ZEROLOOP_TRACKING_WAIT`` overrides).
TRACKING_WAIT_S = 15.0
#: How long a server that took the connection has to answer the check.
ANSWER_WAIT_S = 60.0


class TrackingUnavailable(ValueError):
    """The tracking store cannot be used: unreachable, refusing the
    credentials, or damaged. One line naming the store; nothing was run."""


def bound_http_retries() -> None:
    for key, value in HTTP_RETRIES.items():
        os.environ.setdefault(key, value)


def _credentials_header() -> dict[str, str]:
    """The auth header MLflow's client would send, from the same variables."""
    import base64

    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return {}


def check_tracking(wait_s: float | None = None) -> str:
    """Check the tracking store before any work; returns its URI.

    A server (``http(s)://``) must take an authenticated request within
    ``wait_s`` seconds (it is asked again while it refuses connections or
    answers 5xx, so a restart is ridden out), and answer it within
    :data:`ANSWER_WAIT_S` once it has taken it (MLflow's basic-auth app spends
    seconds a request on a busy machine); a wrong or missing password is
    reported at once. A sqlite store that exists must be a readable database.
    Raises :class:`TrackingUnavailable` with one line; never prints a secret.
    """
    uri = tracking_uri()
    if wait_s is None:
        wait_s = float(os.environ.get("ZEROLOOP_TRACKING_WAIT", TRACKING_WAIT_S))
    if uri.startswith(("http://", "https://")):
        _check_server(uri, wait_s)
    elif uri.startswith("sqlite:///"):
        _sqlite_store_ready(uri, Path(uri.removeprefix("sqlite:///")))
    return uri


def prefetch_client() -> None:
    """Import MLflow's client and the store module for :func:`tracking_uri` in
    a background thread, while the stage works.

    The imports cost a stage about 5 s of one core (MLflow itself, then
    SQLAlchemy's store or the REST one), as much as a tiny stage's work; a stage
    logs only after its work (training: before it), and mostly waits on its
    worker processes meanwhile, so the imports cost no wall-clock time there.
    :meth:`Tracker.open <zeroloop.pipeline.tracking.runs.Tracker.open>` imports
    the same modules, waiting for this thread if it is still at it. Not a
    daemon: the interpreter never exits mid-import.
    """
    import threading

    names = ["mlflow.tracking"]  # the REST store comes with it
    if not tracking_uri().startswith(("http://", "https://", "databricks")):
        names.append("mlflow.store.tracking.sqlalchemy_store")

    def load() -> None:
        import importlib

        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - Tracker.open imports it again and reports what failed
                return

    threading.Thread(target=load, name="mlflow-import").start()


def _check_server(uri: str, wait_s: float) -> None:
    import requests

    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search?max_results=1"
    headers = _credentials_header()
    deadline = time.monotonic() + wait_s
    where = f"MLFLOW_TRACKING_URI={uri}"
    while True:
        left = max(1.0, deadline - time.monotonic())
        try:
            # a server that took the connection is alive: it gets ANSWER_WAIT_S to answer (basic auth
            # hashes the password on every request, seconds on a busy machine); connecting is bounded
            # by the wait, so a server that is not there fails within it
            answer_s = max(ANSWER_WAIT_S, left)
            answer = requests.get(url, headers=headers, timeout=(min(5.0, left), answer_s))
        except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema) as exc:
            raise TrackingUnavailable(f"{where}: not a URL MLflow can use ({exc})") from None
        except requests.exceptions.ReadTimeout:
            raise TrackingUnavailable(f"{where}: the server took the connection but sent no answer within "
                                      f"{answer_s:.0f}s; check its log; nothing was run") from None
        except requests.exceptions.RequestException as exc:  # refused, unreachable, connect timed out
            why = _reason(exc)
        else:
            user = os.environ.get("MLFLOW_TRACKING_USERNAME")
            code = answer.status_code
            if code < 400:
                return
            if code == 401:
                raise TrackingUnavailable(
                    f"{where}: the server refused the credentials of user {user!r} (wrong password?); "
                    "check MLFLOW_TRACKING_PASSWORD; nothing was run" if user else
                    f"{where}: the server wants credentials: set MLFLOW_TRACKING_USERNAME and "
                    "MLFLOW_TRACKING_PASSWORD (docs/cluster.md); nothing was run") from None
            if code == 403:
                raise TrackingUnavailable(f"{where}: user {user!r} may not read experiments there; "
                                          "nothing was run") from None
            if code < 500:
                raise TrackingUnavailable(f"{where}: not an MLflow tracking server (HTTP {code} from "
                                          f"{url.split('?')[0]}); nothing was run") from None
            why = f"HTTP {code}"
        if time.monotonic() >= deadline:
            raise TrackingUnavailable(f"{where}: no MLflow server answered within {wait_s:.0f}s ({why}); "
                                      "start it, or unset MLFLOW_TRACKING_URI to log to mlflow.db here; "
                                      "nothing was run") from None
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def _reason(exc: BaseException) -> str:
    """The OS's words for a failed connection ("Connection refused"), from the chain beneath ``exc``."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        todo += [x for x in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args)
                 if isinstance(x, BaseException)]
    return type(exc).__name__


def _sqlite_store_ready(uri: str, path: Path) -> None:
    """A sqlite store that exists is checked (:func:`_check_sqlite`); a new one
    is made here, one process at a time.

    MLflow makes a new store's tables on its first open, and runs its schema
    migrations, without a lock. Two stages that started together on a new
    store (two queued experiments, ``dvc queue start --jobs 2``) both ran
    them: both failed, and the store was left half-migrated, every later
    stage failing on it. So the store's folder is locked (``flock``) while a
    process looks at the store and, when there is none, makes it; the others
    wait, then find it made. Where there is no lock to take (a folder that
    cannot be opened, a file system without locks, no ``fcntl``), the store
    is looked at and made as before, and MLflow names what fails."""
    folder = None
    try:
        import fcntl

        folder = os.open(path.parent, os.O_RDONLY)
        fcntl.flock(folder, fcntl.LOCK_EX)
    except (ImportError, OSError):
        pass
    try:
        if path.exists() and path.stat().st_size > 0:
            _check_sqlite(path)
            return
        import logging

        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.ERROR)  # "Creating initial MLflow database tables"
        MlflowClient(uri).search_experiments(max_results=1)  # MLflow keeps this store for the stage
    finally:
        if folder is not None:
            os.close(folder)  # and the lock with it


def _check_sqlite(path: Path) -> None:
    import sqlite3

    if not path.exists() or path.stat().st_size == 0:
        return  # MLflow creates it
    try:
        # read-write (never created: mode=rw), so that a process killed mid-write (SIGKILL, the OOM
        # killer) leaves a hot journal SQLite rolls back here, as it is designed to; read-only, that
        # recovery fails with "attempt to write a readonly database" and a sound store looked damaged
        conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=30)
        try:
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error as exc:
        verdict = str(exc)
    if verdict != "ok":
        raise TrackingUnavailable(f"{path}: the MLflow store is damaged ({verdict}); move it aside "
                                  f"(mv {path.name} {path.name}.damaged) to start a new one, or restore it "
                                  "from a backup; nothing was run")


def failure_line(exc: BaseException) -> str:
    """A failed MLflow call in one short line: its message's first line, or the error's name."""
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__


def tracking_errors() -> tuple[type[BaseException], ...]:
    """What a failed MLflow call raises: its own error, or the HTTP stack's beneath it."""
    import requests
    from mlflow.exceptions import MlflowException

    return (MlflowException, requests.RequestException)


def artifact_location() -> str | None:
    """Where a new experiment's artifacts go: ``<repo>/mlartifacts`` with a
    local store; the server's choice with a tracking server (an ``http(s)``
    URI), which proxies them to its artifact store."""
    if tracking_uri().startswith(("http://", "https://", "databricks")):
        return None
    return (repo_root() / "mlartifacts").as_uri()


#: Marks the experiment as model training. MLflow 3.17's UI does not read it to pick the landing
#: page: that follows the GenAI / Model training toggle (the URL's ``workflowType``, else the
#: browser's ``localStorage``, else GenAI), so ``make ui`` prints a URL with
#: ``workflowType=machine_learning`` (docs/tracking.md). Kept for other clients and older UIs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def open_experiment(client, name: str) -> str:
    """The experiment's id, created if needed, marked as model training.
    Two processes that both find it missing (two machines starting on one
    server) both create it: the one that loses takes the winner's."""
    from mlflow.exceptions import MlflowException

    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            return client.create_experiment(name, artifact_location=artifact_location(), tags=EXPERIMENT_KIND)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if "mlflow.experimentKind" not in exp.tags:
        client.set_experiment_tag(exp.experiment_id, *next(iter(EXPERIMENT_KIND.items())))
    return exp.experiment_id
