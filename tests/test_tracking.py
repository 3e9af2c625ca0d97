"""MLflow mirrors what the stages wrote: parents are RUNNING only while a
stage runs, a generation's run is completed from report files DVC restored
without running their stages, and a training rerun replaces its curves."""

import os
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import yaml
from mlflow.tracking import MlflowClient

from services import STAGES
from zeroloop.pipeline.params import parse_params

# the module's tests share the servers its fixtures start once: they run in one test process
pytestmark = pytest.mark.xdist_group("tracking")

TINY = {"game": "tictactoe", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
        "mcts": {"simulations": 4}, "selfplay": {"games": 40, "shard_games": 20},
        "train": {"epochs": 2, "batch_size": 16}, "runtime": {"workers": 1},
        "generations": {"1": {"prev": 0}}, "mlflow": {"experiment": "mirror"}}


def _stage_runner(root, db):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}

    def run(*args):
        out = subprocess.run([*STAGES, *args], cwd=root, env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return out

    return run


def _write_params(root, **changes):
    data = parse_params({**TINY, **changes}).to_yaml_data()
    (root / "params.yaml").write_text(yaml.safe_dump(data))


@pytest.fixture(scope="module")
def played(tmp_path_factory, mlflow_template_db):
    """``init`` and generation 1's self-play, run once for the module: (the
    folder, with its store as mlflow.db, and what self-play printed)."""
    root = tmp_path_factory.mktemp("played")
    shutil.copy(mlflow_template_db, root / "mlflow.db")
    _write_params(root)
    run = _stage_runner(root, root / "mlflow.db")
    run("init")
    return root, run("selfplay", "--gen", "1", "--prev", "0").stderr


@pytest.fixture
def stages(tmp_path, played):
    """A copy of the played folder and its store: (write params, run a stage, a client)."""
    root = tmp_path / "repo"
    shutil.copytree(played[0], root)
    return (lambda **changes: _write_params(root, **changes), _stage_runner(root, root / "mlflow.db"),
            MlflowClient(f"sqlite:///{root / 'mlflow.db'}"))


def _runs(client):
    exp = client.get_experiment_by_name("mirror")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    gens = [r for r in runs if "zeroloop.generation" in r.data.tags]
    return parents, gens


@pytest.mark.slow
def test_a_pipeline_that_stops_early_leaves_no_parent_running(stages):
    _, run, client = stages  # init and self-play ran; training did not
    parents, gens = _runs(client)
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert [g.info.status for g in gens] == ["FINISHED"]


@pytest.mark.slow
def test_a_new_configuration_gets_the_metrics_of_cached_upstream_stages(stages):
    write, run, client = stages  # init and self-play ran
    # as `dvc exp run -S train.lr=...`: another configuration whose self-play is cached
    write(train={"epochs": 2, "batch_size": 16, "lr": 0.005})
    run("train", "--gen", "1", "--prev", "0")
    parents, gens = _runs(client)
    assert len(parents) == 2
    newest = max(parents, key=lambda r: r.info.start_time)
    mine = [g for g in gens if g.data.tags["mlflow.parentRunId"] == newest.info.run_id]
    assert len(mine) == 1
    logged = set(mine[0].data.metrics)
    assert {"selfplay/games", "selfplay/positions", "train/samples", "train/loss_epoch"} <= logged


@pytest.mark.slow
def test_a_training_rerun_replaces_its_loss_curves(stages, played):
    from zeroloop.engine.nn.machine import describe

    _, run, client = stages  # init and self-play ran
    said = played[1]
    here = describe("auto", "auto")  # the machine, and what precision auto resolves to on it
    assert f"network {here['precision']} (precision auto) on cpu: {here['cpu']}, {here['cores']} cores" \
        in said
    run("train", "--gen", "1", "--prev", "0")
    run("train", "--gen", "1", "--prev", "0")
    _, gens = _runs(client)  # deleted runs are not listed
    assert len(gens) == 1
    run_id = gens[0].info.run_id
    steps = Counter(m.step for m in client.get_metric_history(run_id, "train/loss_step"))
    assert steps and max(steps.values()) == 1, f"repeated steps: {steps}"
    assert len(client.get_metric_history(run_id, "train/loss_epoch")) == 2  # epochs, once
    assert "selfplay/games" in gens[0].data.metrics
    # where self-play ran is a tag of the generation's run, the rerun's new run too
    assert {k: gens[0].data.tags.get(f"selfplay.{k}") for k in here} == here
    assert gens[0].data.params["runtime.precision_resolved"] == here["precision"]


def test_temporary_dvc_experiments_log_to_the_repository_store(tmp_path, monkeypatch):
    from zeroloop.pipeline.tracking.store import repo_root, tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "repo" / ".dvc" / "tmp" / "exps" / "tmpab12cd"))
    assert repo_root() == (tmp_path / "repo").resolve()
    assert tracking_uri() == f"sqlite:///{(tmp_path / 'repo' / 'mlflow.db').resolve()}"
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "plain"))
    assert repo_root() == (tmp_path / "plain").resolve()


def test_an_experiment_another_process_created_meanwhile_is_taken_not_fatal(mlflow_db, monkeypatch):
    """Two machines starting on one server both find the experiment missing and
    both create it (CI saw `zeroloop tune` fail so): the loser takes the winner's."""
    from zeroloop.pipeline.tracking.store import EXPERIMENT_KIND, open_experiment

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    client = MlflowClient(f"sqlite:///{mlflow_db}")
    winner = client.create_experiment("raced", tags=EXPERIMENT_KIND)  # the other machine, first

    class LateClient:  # this machine's first look came before the other's create
        looked = False

        def __getattr__(self, name):
            return getattr(client, name)

        def get_experiment_by_name(self, name):
            if not self.looked:
                self.looked = True
                return None
            return client.get_experiment_by_name(name)

    assert open_experiment(LateClient(), "raced") == winner
    # the store names the clash as open_experiment expects
    with pytest.raises(Exception, match="already exists") as caught:
        client.create_experiment("raced")
    assert caught.value.error_code == "RESOURCE_ALREADY_EXISTS"


@pytest.mark.slow
def test_stages_that_start_together_on_a_new_store_all_log_to_it(tmp_path, played):
    """Three stages start together on a sqlite store that does not exist yet
    (three queued experiments, ``dvc queue start --jobs 3``, on a fresh clone).
    MLflow makes a new store's tables and migrates them without a lock: before
    the store's folder was locked for it, all three failed with a traceback
    and left the store half-migrated, failing every later stage."""
    db = tmp_path / "new" / "mlflow.db"
    db.parent.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    procs = []
    for i in range(3):
        root = tmp_path / f"exp{i}"
        shutil.copytree(played[0], root)
        _write_params(root, selfplay={"games": 2, "shard_games": 2}, mlflow={"experiment": f"together-{i}"})
        procs.append(subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=root, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        err = proc.communicate(timeout=300)[1]
        assert proc.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "database tables" not in err
    client = MlflowClient(f"sqlite:///{db}")
    for i in range(3):
        runs = client.search_runs([client.get_experiment_by_name(f"together-{i}").experiment_id])
        assert sorted(r.info.run_name for r in runs if "mlflow.parentRunId" in r.data.tags) == ["gen-1"]


@pytest.mark.parametrize("uri, sql", [("sqlite:///{tmp}/mlflow.db", True), ("http://127.0.0.1:9", False)])
@pytest.mark.slow
def test_a_stage_imports_mlflow_while_it_works(tmp_path, uri, sql):
    """MLflow's client, and SQLAlchemy's store for a database URI, are imported in a
    thread (5 s of a tiny stage otherwise): by the time the stage logs, they are there."""
    code = ("import sys, threading\n"
            "from zeroloop.pipeline.tracking.store import prefetch_client\n"
            "assert 'mlflow' not in sys.modules\n"
            "prefetch_client()\n"
            "[t.join() for t in threading.enumerate() if t.name == 'mlflow-import']\n"
            "print('mlflow.tracking' in sys.modules,\n"
            "      'mlflow.store.tracking.sqlalchemy_store' in sys.modules)\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri.format(tmp=tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", str(sql)]


@pytest.mark.slow
def test_a_store_a_killed_process_left_mid_write_is_recovered_not_called_damaged(tmp_path):
    """SIGKILL (or the OOM killer) in the middle of an MLflow write leaves
    sqlite's hot journal beside mlflow.db: the next opener rolls it back, as
    sqlite is designed to. The store check must let it, not call the store
    damaged ("attempt to write a readonly database") and refuse to run."""
    import sqlite3

    from zeroloop.pipeline.tracking.store import _check_sqlite

    db = tmp_path / "mlflow.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, note TEXT)")
        conn.executemany("INSERT INTO runs (note) VALUES (?)", [("x" * 500,)] * 2000)
    conn.close()
    # a write bigger than the page cache spills into the file before its commit; then SIGKILL
    killed = subprocess.run([sys.executable, "-c", (
        "import os, signal, sqlite3\n"
        f"c = sqlite3.connect({str(db)!r}, isolation_level=None)\n"
        "c.execute('PRAGMA cache_size=5'); c.execute('BEGIN')\n"
        "c.execute(\"UPDATE runs SET note = 'y'\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")], timeout=60)
    assert killed.returncode == -9
    assert (tmp_path / "mlflow.db-journal").stat().st_size > 0  # the hot journal
    _check_sqlite(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE note = 'y'").fetchone()[0] == 0  # rolled back
    conn.close()
