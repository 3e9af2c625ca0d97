"""A team's servers, for real on localhost: MLflow on PostgreSQL, a shared
Optuna study on PostgreSQL driven from two processes, PostgreSQL restarting
under a stage and under a study, MLflow's basic-auth app, and a tracking
store that is down, refusing or damaged."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from services import (
    STAGES,
    ZEROLOOP,
    MlflowServer,
    Postgres,
    clean_env,
    free_port,
    stage,
    why_no_postgres,
    write_params,
)

# the module's tests share the servers its fixtures start once: they run in one test process
pytestmark = pytest.mark.xdist_group("team_servers")

TINY = {
    "game": "tictactoe", "seed": 5,
    "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
    "mcts": {"simulations": 8},
    "selfplay": {"games": 16, "shard_games": 4, "temperature_moves": 4},
    "train": {"epochs": 1, "batch_size": 16, "replay_generations": 2},
    "gate": {"games": 8, "simulations": 8, "opening_plies": 1},
    "evaluate": {"games": 4, "simulations": 8, "opening_plies": 1, "uct_playouts": 10,
                 "positions_per_group": 3, "test_positions_per_group": 3},
    "generations": {"1": {"prev": 0}, "2": {"prev": 1}},
    "runtime": {"workers": 1},
}



def chain(gens: list[int]) -> list[list[str]]:
    """dvc.yaml's stage commands in order, without DVC."""
    steps = [["init"], ["positions"], ["test_positions"]]
    for g in gens:
        steps += [[s, "--gen", str(g), "--prev", str(g - 1)] for s in ("selfplay", "train", "gate")]
        steps.append(["evaluate", "--gen", str(g)])
    return steps + [["report"]]


@pytest.fixture(scope="module")
def postgres():
    why = why_no_postgres()
    if why:
        pytest.skip(why)
    pg = Postgres()
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture(scope="module")
def pg_mlflow(postgres, tmp_path_factory):
    """An MLflow server whose backend store is PostgreSQL, artifacts proxied."""
    work = tmp_path_factory.mktemp("pg-mlflow")
    server = MlflowServer(postgres.create_database("mlflow"), work / "artifacts", workdir=work)
    try:
        yield server
    finally:
        server.close()


def no_traceback(text: str) -> None:
    assert "Traceback" not in text, text[-3000:]


@pytest.mark.slow
def test_the_pipeline_logs_every_generation_to_mlflow_on_postgresql_through_a_database_restart(
        tmp_path, postgres, pg_mlflow):
    root = tmp_path / "repo"
    # one generation: how stages of several generations meet in one parent run is the end-to-end test's
    write_params(root, {**TINY, "generations": {"1": {"prev": 0}}, "mlflow": {"experiment": "pg-pipeline"}})
    env = clean_env(MLFLOW_TRACKING_URI=pg_mlflow.url)
    steps = chain([1])
    for step in steps[:steps.index(["selfplay", "--gen", "1", "--prev", "0"])]:
        stage(root, env, *step)

    # PostgreSQL goes down while self-play plays, and is back 4 s later: the stage's logging (and
    # the server's pooled connections) ride it out, the work is kept
    proc = subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=root, env=env,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((root / "data/gen_1").glob("shard_*.zls")) and time.time() < deadline:
        time.sleep(0.05)
    postgres.restart(down_s=4)
    assert proc.wait(timeout=300) == 0, proc.stderr.read()[-3000:]
    for step in steps[steps.index(["train", "--gen", "1", "--prev", "0"]):]:
        stage(root, env, *step)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(pg_mlflow.url)
    exp = client.get_experiment_by_name("pg-pipeline")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    gens = {int(r.data.tags["zeroloop.generation"]): r for r in runs if "zeroloop.generation" in r.data.tags}
    assert sorted(gens) == [1]
    for g, run in gens.items():
        assert run.info.status == "FINISHED", g
        m = run.data.metrics
        assert {"selfplay/games", "train/loss_epoch", "gate/score", "eval/vs_random_score"} <= set(m), (g, m)
        assert m["selfplay/games"] == 16
    assert len(list((root / "data/gen_1").glob("shard_*.zls"))) == 4
    versions = client.search_model_versions("name = 'zeroloop-tictactoe'")
    assert versions and client.get_model_version_by_alias("zeroloop-tictactoe", "champion")


def _tiny_model(path: Path) -> None:
    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.data.storage import save_model

    game = make_game("tictactoe")
    torch.manual_seed(0)
    save_model(path, PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8, value_hidden=8)), game)


TUNE = {"game": "tictactoe", "tune": {"games": 4, "rounds": 2, "simulations": 8, "reference": "random",
                                      "pruner": "none", "confirm_games": 0}}


def _trials_match(optuna_url: str, mlflow_url: str, study: str, experiment: str):
    """Optuna's trials and the MLflow trial runs of the study: checked one to one; returns both."""
    import optuna
    from mlflow.tracking import MlflowClient

    trials = optuna.load_study(study_name=study, storage=optuna_url).trials
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    client = MlflowClient(mlflow_url)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("zeroloop.study") == study]
    assert len(parents) == 1, [p.info.run_id for p in parents]  # one parent, whoever came first
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    by_trial = {}
    for r in children:
        n = int(r.data.tags["optuna.trial"])
        assert n not in by_trial, f"trial {n} has two MLflow runs"
        by_trial[n] = r
    assert sorted(by_trial) == sorted(numbers)
    for t in trials:
        run = by_trial[t.number]
        assert run.info.status != "RUNNING", t.number
        expected = {"COMPLETE": "COMPLETE", "PRUNED": "PRUNED",
                    "FAIL": ("FAILED", "INTERRUPTED")}[t.state.name]
        assert run.data.tags["optuna.state"] in expected, (t.number, t.state, run.data.tags)
        if t.state.name == "COMPLETE":
            assert run.data.params["c_puct"] == str(t.params["c_puct"])
    assert parents[0].info.status != "RUNNING"
    return trials, by_trial


@pytest.mark.slow
def test_two_machines_share_one_postgresql_study_and_one_mlflow_server(tmp_path, postgres, pg_mlflow):
    optuna_url = postgres.create_database("optuna_shared")
    machines = []
    for name in ("a", "b"):  # two "machines": separate folders, same storage and server
        root = tmp_path / name
        # one process a machine: the two machines are the concurrency here (test_tune and
        # test_cluster run several jobs a machine)
        write_params(root, {**TUNE, "mlflow": {"experiment": "pg-tune"}, "runtime": {"workers": 1}})
        _tiny_model(root / "model.pt")
        machines.append(root)
    procs = [subprocess.Popen([*ZEROLOOP, "tune", "--trials", "3", "--jobs", "1", "--model",
                               "model.pt", "--storage", optuna_url, "--study", "shared"], cwd=root,
                              env=clean_env(MLFLOW_TRACKING_URI=pg_mlflow.url), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for root in machines]
    for p in procs:
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
        no_traceback(err)
    trials, _ = _trials_match(optuna_url, pg_mlflow.url, "shared", "pg-tune")
    assert len(trials) == 6 and all(t.state.name == "COMPLETE" for t in trials)  # exactly those asked for
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1  # the defaults are tried once


@pytest.mark.slow
def test_jobs_that_open_a_new_postgresql_study_together_all_get_it(postgres):
    """As test_tune's sqlite case: Optuna creates a new database's tables
    without a lock, and two machines that start a study together race to."""
    from test_tune import _open_together

    url = postgres.create_database("optuna_together")
    got, errors = _open_together(url, 4)
    assert not errors, errors
    assert len(got) == 4
    assert sum(bool(t.user_attrs.get("default")) for t in got[0].trials) == 1


@pytest.mark.slow
def test_many_processes_tagging_one_run_at_once_all_land(pg_mlflow):
    """Every machine of a shared study ends it by tagging the study's run:
    writers of one new tag key at the same moment must all succeed (MLflow's
    ``set_tag`` let the loser fail with a unique violation on ``tag_pk``)."""
    from mlflow.tracking import MlflowClient

    from zeroloop.pipeline.tracking.runs import set_tags

    client = MlflowClient(pg_mlflow.url)
    run_id = client.create_run(client.create_experiment("pg-tag-race")).info.run_id
    writers, rounds = 8, 12
    failures: list[str] = []

    def write(i: int, key: str, start: threading.Barrier) -> None:
        mine = MlflowClient(pg_mlflow.url)
        start.wait()
        try:
            set_tags(mine, run_id, {key: f"writer {i}"})
        except Exception as exc:  # noqa: BLE001 - every failure is the finding
            failures.append(f"{key}: {str(exc).splitlines()[0][:200]}")

    for r in range(rounds):
        start = threading.Barrier(writers)
        threads = [threading.Thread(target=write, args=(i, f"best_trial_{r}", start)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not failures, failures
    tags = client.get_run(run_id).data.tags
    assert all(tags[f"best_trial_{r}"].startswith("writer ") for r in range(rounds))


@pytest.mark.slow
def test_a_study_survives_a_postgresql_restart_and_resumes_without_losing_a_trial(tmp_path, postgres,
                                                                                   pg_mlflow):
    optuna_url = postgres.create_database("optuna_restart")
    write_params(tmp_path, {**TUNE, "tune": {**TUNE["tune"], "games": 8, "rounds": 4},
                            "mlflow": {"experiment": "pg-restart"}})
    _tiny_model(tmp_path / "model.pt")
    cmd = [*ZEROLOOP, "tune", "--trials", "4", "--model", "model.pt", "--storage", optuna_url,
           "--study", "restart"]
    env = clean_env(MLFLOW_TRACKING_URI=pg_mlflow.url)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)

    def restart_in_trial_1() -> None:
        import optuna

        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            try:
                if len(optuna.load_study(study_name="restart", storage=optuna_url).trials) >= 2:
                    break
            except Exception:  # noqa: BLE001 - not created yet
                pass
            time.sleep(0.2)
        postgres.restart(down_s=3)

    t = threading.Thread(target=restart_in_trial_1)
    t.start()
    out, err = proc.communicate(timeout=900)
    t.join()
    no_traceback(err)
    first = [ln for ln in err.splitlines() if ln.startswith("zeroloop tune: error")]
    assert proc.returncode == 0 or (proc.returncode == 2 and len(first) == 1), err[-3000:]
    # rerun: the study goes on from what the storage holds
    again = subprocess.run(cmd[:3] + ["2"] + cmd[4:], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    trials, _ = _trials_match(optuna_url, pg_mlflow.url, "restart", "pg-restart")
    done = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(trials) == 6 and len(done) >= 5, [(t.number, t.state.name) for t in trials]
    assert sum(bool(t.user_attrs.get("default")) for t in trials) == 1


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory, mlflow_template_db):
    """MLflow's basic-auth app over a sqlite store: admin credentials from the environment."""
    work = tmp_path_factory.mktemp("auth-mlflow")
    shutil.copy(mlflow_template_db, work / "mlflow.db")  # its tables made once (creating them takes seconds)
    server = MlflowServer(f"sqlite:///{work / 'mlflow.db'}", work / "artifacts", workdir=work,
                          auth=("admin", "admin-password-9"))
    try:
        yield server
    finally:
        server.close()


def _add_user(server: MlflowServer, user: str, password: str) -> None:
    import requests

    r = requests.post(f"{server.url}/api/2.0/mlflow/users/create", json={"username": user,
                      "password": password}, auth=("admin", "admin-password-9"), timeout=30)
    assert r.status_code == 200, r.text


@pytest.mark.slow
def test_a_basic_auth_server_takes_the_teams_runs_and_refuses_others(tmp_path, auth_server):
    import requests

    _add_user(auth_server, "alice", "alice-password-123")
    # a request without credentials is refused
    r = requests.get(f"{auth_server.url}/api/2.0/mlflow/experiments/search?max_results=1", timeout=30)
    assert r.status_code == 401

    root = tmp_path / "repo"
    write_params(root, {**TINY, "generations": {"1": {"prev": 0}}, "mlflow": {"experiment": "team-auth"}})
    stage(root, clean_env(), "init")
    # no credentials, then a wrong password: one line each, no work done, no secret printed
    for extra, words in (({}, "wants credentials"),
                         ({"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": "wrong-pw-77"},
                          "refused the credentials of user 'alice'")):
        out = stage(root, clean_env(MLFLOW_TRACKING_URI=auth_server.url, **extra), "selfplay", "--gen", "1",
                    "--prev", "0", check=False)
        assert out.returncode == 2 and words in out.stderr, out.stderr[-2000:]
        assert len(out.stderr.strip().splitlines()) == 1 and "wrong-pw-77" not in out.stderr
        assert not (root / "data/gen_1").exists()
    env = clean_env(MLFLOW_TRACKING_URI=auth_server.url, MLFLOW_TRACKING_USERNAME="alice",
                    MLFLOW_TRACKING_PASSWORD="alice-password-123")
    for s in ("selfplay", "train"):
        out = stage(root, env, s, "--gen", "1", "--prev", "0")
        assert "alice-password-123" not in out.stdout + out.stderr
    # the server keeps checked credentials (auth_cache_ttl_seconds), never a wrong password beside them
    r = requests.get(f"{auth_server.url}/api/2.0/mlflow/experiments/search?max_results=1",
                     auth=("alice", "wrong-pw-77"), timeout=30)
    assert r.status_code == 401
    from mlflow.tracking import MlflowClient

    os.environ.update(MLFLOW_TRACKING_USERNAME="alice", MLFLOW_TRACKING_PASSWORD="alice-password-123")
    try:
        client = MlflowClient(auth_server.url)
        exp = client.get_experiment_by_name("team-auth")
        runs = client.search_runs([exp.experiment_id])
        gen1 = next(r for r in runs if r.data.tags.get("zeroloop.generation") == "1")
        assert {"selfplay/games", "train/loss_epoch"} <= set(gen1.data.metrics)
        # the experiment is alice's: another user (default permission READ) may read it, not write to it
        import requests

        _add_user(auth_server, "bob", "bob-password-456")
        r = requests.post(f"{auth_server.url}/api/2.0/mlflow/runs/create",
                          json={"experiment_id": exp.experiment_id}, auth=("bob", "bob-password-456"),
                          timeout=30)
        assert r.status_code == 403, r.text
        r = requests.get(f"{auth_server.url}/api/2.0/mlflow/runs/get", params={"run_id": gen1.info.run_id},
                         auth=("bob", "bob-password-456"), timeout=30)
        assert r.status_code == 200, r.text
    finally:
        del os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]


@pytest.mark.slow
def test_an_unreachable_tracking_server_fails_the_stage_before_any_work_in_one_line(tmp_path, mlflow_db):
    root = tmp_path / "repo"
    write_params(root, {**TINY, "generations": {"1": {"prev": 0}}})
    stage(root, clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}"), "init")
    port = free_port()  # nothing listens there
    start = time.monotonic()
    out = stage(root, clean_env(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{port}", ZEROLOOP_TRACKING_WAIT="3"),
                "selfplay", "--gen", "1", "--prev", "0", check=False)
    took = time.monotonic() - start
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"http://127.0.0.1:{port}" in lines[0] and "nothing was run" in lines[0]
    assert took < 60  # bounded: MLflow's own retries would wait minutes
    assert not (root / "data/gen_1").exists()
    # the next run, with the store back, logs normally
    back = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}")
    stage(root, back, "selfplay", "--gen", "1", "--prev", "0")
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(f"sqlite:///{mlflow_db}").search_runs(
        [MlflowClient(f"sqlite:///{mlflow_db}").get_experiment_by_name("zeroloop").experiment_id])
    assert any(r.data.metrics.get("selfplay/games") == 16 for r in runs)


@pytest.mark.slow
def test_a_tracking_server_lost_after_the_work_costs_the_log_not_the_work(tmp_path, mlflow_db):
    """The store answers the stage's first check, then goes away: the shards are
    written, the stage succeeds and says in one line what was not logged."""
    from services import MlflowServer as Server

    root = tmp_path / "repo"
    # games enough that self-play outlasts the moment its first shard appears
    write_params(root, {**TINY, "generations": {"1": {"prev": 0}}, "mcts": {"simulations": 24},
                        "selfplay": {**TINY["selfplay"], "games": 64}})
    stage(root, clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}"), "init")
    server = Server(f"sqlite:///{mlflow_db}", tmp_path / "art", workdir=tmp_path)
    env = clean_env(MLFLOW_TRACKING_URI=server.url, MLFLOW_HTTP_REQUEST_MAX_RETRIES="1",
                    MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR="1")
    proc = subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=root, env=env,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((root / "data/gen_1").glob("shard_*")) and time.time() < deadline:
        time.sleep(0.02)
    server.close()  # gone before the stage logs
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 0, err[-3000:]
    no_traceback(err)
    warn = [ln for ln in err.splitlines() if "not logged" in ln]
    assert len(warn) == 1 and "self-play metrics" in warn[0], err[-2000:]
    assert len(list((root / "data/gen_1").glob("shard_*.zls"))) == 16


@pytest.mark.slow
def test_a_damaged_mlflow_db_fails_the_stage_before_any_work_naming_the_file(tmp_path, mlflow_db):
    root = tmp_path / "repo"
    write_params(root, {**TINY, "generations": {"1": {"prev": 0}}})
    env = clean_env()
    db = root / "mlflow.db"  # the default store, a copy of an empty one (creating one takes seconds)
    shutil.copy(mlflow_db, db)
    stage(root, env, "init")
    stage(root, env, "selfplay", "--gen", "1", "--prev", "0")  # a real store with runs in it
    size = db.stat().st_size
    with open(db, "r+b") as f:
        f.truncate(size // 3)
    before = db.read_bytes()
    out = stage(root, env, "train", "--gen", "1", "--prev", "0", check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and "damaged" in lines[0], out.stderr[-2000:]
    assert not (root / "models/generations/gen_1/candidate.pt").exists()
    assert db.read_bytes() == before  # left as it was, for the user to rescue
    # moved aside as the line says, the stage runs and logs to a new store
    db.rename(root / "mlflow.db.damaged")
    stage(root, env, "train", "--gen", "1", "--prev", "0")


def _running(client, exp_id) -> list[str]:
    return [r.info.run_name for r in client.search_runs([exp_id]) if r.info.status == "RUNNING"]


@pytest.mark.slow
def test_tune_stopped_by_sigterm_leaves_nothing_running(tmp_path, mlflow_db):
    import optuna
    from mlflow.tracking import MlflowClient

    write_params(tmp_path, {**TUNE, "tune": {**TUNE["tune"], "games": 16, "rounds": 4},
                            "mlflow": {"experiment": "sigterm"}})
    _tiny_model(tmp_path / "model.pt")
    proc = subprocess.Popen([*ZEROLOOP, "tune", "--trials", "50", "--model", "model.pt",
                             "--storage", "sqlite:///optuna.db", "--study", "term"], cwd=tmp_path,
                            env=clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        try:
            study = optuna.load_study(study_name="term", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
            if any(t.state.name == "COMPLETE" for t in study.trials) and \
                    any(t.state.name == "RUNNING" for t in study.trials):
                break
        except Exception:  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.2)
    proc.terminate()  # SIGTERM, as `timeout`, a CI cancel or `kill` send
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-2000:]
    no_traceback(err)
    assert "stopped by SIGTERM" in err
    study = optuna.load_study(study_name="term", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert not [t.number for t in study.trials if t.state.name == "RUNNING"]
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    assert _running(client, client.get_experiment_by_name("sigterm").experiment_id) == []


@pytest.mark.slow
def test_tune_refuses_parallel_jobs_on_sqlite_before_creating_anything(tmp_path, mlflow_db):
    from mlflow.tracking import MlflowClient

    write_params(tmp_path, {**TUNE, "mlflow": {"experiment": "refused"}})
    _tiny_model(tmp_path / "model.pt")
    out = subprocess.run([*ZEROLOOP, "tune", "--trials", "2", "--jobs", "2", "--model",
                          "model.pt", "--storage", "sqlite:///optuna.db"], cwd=tmp_path,
                         env=clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}"), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and re.search(r"--jobs > 1 needs a storage", out.stderr), out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1
    assert MlflowClient(f"sqlite:///{mlflow_db}").get_experiment_by_name("refused") is None
    assert not (tmp_path / "optuna.db").exists()


@pytest.mark.slow
def test_tune_with_an_unreachable_tracking_server_fails_in_one_line_before_any_trial(tmp_path):
    write_params(tmp_path, {**TUNE, "mlflow": {"experiment": "down"}})
    _tiny_model(tmp_path / "model.pt")
    out = subprocess.run([*ZEROLOOP, "tune", "--trials", "2", "--model", "model.pt",
                          "--storage", "sqlite:///optuna.db"], cwd=tmp_path,
                         env=clean_env(MLFLOW_TRACKING_URI=f"http://127.0.0.1:{free_port()}",
                                       ZEROLOOP_TRACKING_WAIT="2"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "no MLflow server answered" in out.stderr
    assert not (tmp_path / "optuna.db").exists()


class _SlowServer:
    """An HTTP server on localhost that answers every GET with ``status`` after ``delay`` seconds."""

    def __init__(self, delay: float, status: int = 200) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                time.sleep(delay)
                body = b'{"experiments": []}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_a_server_that_takes_the_check_is_waited_for_beyond_the_connection_wait(monkeypatch):
    """MLflow's basic-auth app hashes the password on every request: seconds on a
    busy machine (CI's 2 cores lost a run to a 5 s cap). A server that took the
    connection is given ANSWER_WAIT_S to answer; one that never answers is named."""
    from zeroloop.pipeline.tracking import store

    with _SlowServer(delay=3) as slow:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", slow.url)
        start = time.monotonic()
        assert store.check_tracking(wait_s=1) == slow.url
        assert time.monotonic() - start >= 3
        monkeypatch.setattr(store, "ANSWER_WAIT_S", 1.0)
        silent = r"took the connection but sent no answer within 1s"
        with pytest.raises(store.TrackingUnavailable, match=silent):
            store.check_tracking(wait_s=1)
    with _SlowServer(delay=0, status=404) as other:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", other.url)
        with pytest.raises(store.TrackingUnavailable, match=r"not an MLflow tracking server \(HTTP 404"):
            store.check_tracking(wait_s=1)


def test_check_tracking_reads_a_server_answer_as_the_client_would(tmp_path):
    """The credentials header follows MLflow's variables; a non-MLflow answer is named."""
    from zeroloop.pipeline.tracking import store

    env = {"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        assert store._credentials_header() == {"Authorization": "Basic dTpw"}
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert json.dumps(store.HTTP_RETRIES)  # bounded defaults exist


@pytest.mark.slow
def test_trial_runs_ride_out_a_tracking_server_that_is_down_and_a_resumed_study_writes_the_lost_ones(
        tmp_path, mlflow_db, monkeypatch, capsys):
    """The store refuses a trial's run while the trial plays: the trial goes on, its run is sent once the
    store is back. A trial whose process went away before that gets its run from Optuna's record when
    the study resumes, once. The server is down once, for all of it (each restart is seconds of CPU):
    trials 0 and 1 run in this process, 2 and 3 in another job's, which ends while it is down."""
    import optuna
    from mlflow.tracking import MlflowClient
    from optuna.distributions import FloatDistribution

    from zeroloop.pipeline.params import Params
    from zeroloop.pipeline.tuning.run import backfill_trial_runs
    from zeroloop.pipeline.tuning.tracker import StudyTracker

    server = MlflowServer(f"sqlite:///{mlflow_db}", tmp_path / "art", workdir=tmp_path)
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refusal at once, no backoff
        storage = f"sqlite:///{tmp_path / 'optuna.db'}"
        study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
        space = {"c_puct": FloatDistribution(0.5, 4.0)}
        tracker = StudyTracker.open(Params(), "s", storage, {})
        other = StudyTracker.open(Params(), "s", storage, {})  # the other job's process
        assert other.parent_id == tracker.parent_id
        t0, t1, t2, t3 = (study.ask(space) for _ in range(4))
        run0 = tracker.trial_run(t0.number, t0.params)  # created; then the server goes down
        run3 = other.trial_run(t3.number, t3.params)
        server.stop()
        run0.log({"score": 0.25}, 0)
        run1 = tracker.trial_run(t1.number, t1.params)  # refused from the start
        run1.log({"score": 0.5}, 0)
        run1.end("COMPLETE")
        study.tell(t1, 0.5)
        assert run1.failure and tracker.unsent == [run1]
        assert "trial 1's run is kept" in capsys.readouterr().err
        # trial 2 starts and ends while the server is down, trial 3 ends then: their process is gone
        # before the server is back
        run2 = other.trial_run(t2.number, t2.params)
        run2.end("COMPLETE")
        study.tell(t2, 0.125)
        run3.end("FAILED", error="ValueError: no")
        study.tell(t3, state=optuna.trial.TrialState.FAIL)
        assert other.unsent == [run2, run3]
        server.start()
        run0.log({"score": 0.75}, 1)
        run0.end("PRUNED")
        study.tell(t0, state=optuna.trial.TrialState.PRUNED)
        assert tracker.flush() == []
        capsys.readouterr()

        said = []
        again = StudyTracker.open(Params(), "s", storage, {})  # the study resumed, as zeroloop tune does
        assert again.parent_id == tracker.parent_id
        backfill_trial_runs(again, "s", storage, said.append)
        assert len(said) == 1 and said[0].startswith("trials 2, 3: no MLflow run"), said
        backfill_trial_runs(StudyTracker.open(Params(), "s", storage, {}), "s", storage, said.append)
        assert len(said) == 1, said  # nothing left to write

        client = MlflowClient(server.url)
        children = client.search_runs([again.experiment_id],
                                      filter_string=f"tags.`mlflow.parentRunId` = '{again.parent_id}'")
        runs = {int(r.data.tags["optuna.trial"]): r for r in children}
        assert len(children) == 4 and sorted(runs) == [0, 1, 2, 3]
        assert [m.value for m in client.get_metric_history(runs[0].info.run_id, "score")] == [0.25, 0.75]
        assert runs[0].data.tags["optuna.state"] == "PRUNED" and runs[0].info.status == "FINISHED"
        assert runs[1].data.metrics["score"] == 0.5 and runs[1].data.tags["optuna.state"] == "COMPLETE"
        for n in (0, 1, 2):
            assert float(runs[n].data.params["c_puct"]) == study.trials[n].params["c_puct"]
        assert runs[2].data.metrics["final_score"] == 0.125
        assert runs[2].data.tags["optuna.state"] == "COMPLETE"
        assert runs[3].info.status == "FAILED" and runs[3].data.tags["optuna.state"] == "FAILED"
        assert all("zeroloop.backfilled" in runs[n].data.tags for n in (2, 3))
        assert not any("zeroloop.backfilled" in runs[n].data.tags for n in (0, 1))
    finally:
        server.close()
