"""Beyond one machine, with the real tools on localhost: a Ray cluster started
with `ray start --head` on 127.0.0.1 and joined by address, an MLflow tracking
server with a database and proxied artifacts, and a DVC remote."""

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from services import PYTHON, STAGES, ZEROLOOP, MlflowServer, free_port, kill_all, ray_env, ray_processes
from zeroloop.pipeline.params import parse_params

# one test process for the modules that start Ray clusters: two at once on two cores starve
# each other's health checks
pytestmark = pytest.mark.xdist_group("ray")

BIN = Path(sys.executable).parent
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

TINY = {
    "game": "tictactoe", "seed": 5,
    "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
    "mcts": {"simulations": 8},
    "selfplay": {"games": 16, "shard_games": 4, "temperature_moves": 4},
    "train": {"epochs": 1, "batch_size": 16, "replay_generations": 2},
    "gate": {"games": 8, "simulations": 8, "opening_plies": 1},
    "generations": {"1": {"prev": 0}},
    "runtime": {"workers": 2},
}

@pytest.fixture(scope="module")
def ray_cluster():
    """A real one-node Ray cluster on 127.0.0.1 with 2 CPUs: (address, temp dir).
    One node rather than test_ray_nodes' head and two worker nodes: three
    raylets cost these tests about a tenth more (session 59)."""
    port = free_port()
    temp = tempfile.mkdtemp(prefix="zr", dir="/tmp")  # short: Ray's socket paths have a length limit
    start = subprocess.run([str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1",
                            f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                            "--disable-usage-stats", f"--temp-dir={temp}",
                            "--object-store-memory=200000000"],
                           env=ray_env(), capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}", temp
    finally:
        kill_all(ray_processes(temp))  # not `ray stop`: it would stop another test's cluster too
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(ray_cluster):
    """The one-node cluster's address."""
    return ray_cluster[0]


def write_params(root: Path, data: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(parse_params(data).to_yaml_data(), sort_keys=False))


def run_chain(root: Path, env: dict, gens: int = 2) -> None:
    """init, then self-play, training and gate per generation: the DVC stages' commands."""
    steps = [["init"]] + [[stage, "--gen", str(g), "--prev", str(g - 1)]
                          for g in range(1, gens + 1) for stage in ("selfplay", "train", "gate")]
    for step in steps:
        out = subprocess.run([*STAGES, *step], cwd=root, env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, f"{step} failed:\n{out.stderr[-3000:]}"


def digests(root: Path, pattern: str) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.glob(pattern))}


def chain_results(root: Path) -> tuple:
    """Generation 1's self-play shards, gate result and models: what two backends must agree on."""
    gate = json.loads((root / "reports/generations/gen_1/gate.json").read_text())
    return (digests(root, "data/gen_1/shard_*.zls"), (gate["wins"], gate["draws"], gate["losses"],
            gate["accepted"]), digests(root, "models/generations/gen_1/*.pt"))


@pytest.mark.slow
def test_ray_backend_gives_the_local_backends_shards_gates_and_champion(tmp_path, ray_head, mlflow_db,
                                                                        local_chain):
    root = tmp_path / "ray"
    # the local chain's params but the backend (and the experiment: neither decides a game)
    write_params(root, {**TINY, "runtime": {"workers": 2, "backend": "ray", "ray_address": ray_head}})
    shutil.copy(mlflow_db, root / "mlflow.db")
    run_chain(root, ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}"), gens=1)
    local, ray = chain_results(local_chain["root"]), chain_results(root)
    assert len(local[0]) == 4 and len(local[2]) == 2  # 4 shards; candidate and best
    assert ray[0] == local[0], "self-play shards differ between the backends"
    assert ray[1] == local[1], "gate results differ between the backends"
    assert ray[2] == local[2], "the champion differs between the backends"


def _ray_task_workers(temp: str) -> list[psutil.Process]:
    """This cluster's worker processes running one of our tasks (Ray titles them ``ray::_run``)."""
    found = []
    for proc in ray_processes(temp):
        try:
            if " ".join(proc.cmdline()).startswith("ray::_run"):
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.mark.slow
def test_a_ray_worker_killed_mid_selfplay_is_retried_and_the_shards_are_unchanged(tmp_path, ray_cluster,
                                                                                  mlflow_db):
    ray_head, temp = ray_cluster
    data = {"game": "connect4", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
            "mcts": {"simulations": 24}, "selfplay": {"games": 60, "shard_games": 10},
            "generations": {"1": {"prev": 0}}}
    roots = {}
    # the calm run in one local process: the games do not depend on the number of workers
    for name, backend, workers in (("calm", "local", 1), ("killed", "ray", 2)):
        root = roots[name] = tmp_path / name
        write_params(root, {**data, "runtime": {"workers": workers, "backend": backend,
                                                "ray_address": ray_head}})
        shutil.copy(mlflow_db, root / "mlflow.db")
    env = {name: ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}")
           for name, root in roots.items()}
    for name, root in roots.items():
        assert subprocess.run([*STAGES, "init"], cwd=root, env=env[name]).returncode == 0

    calm = subprocess.run([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=roots["calm"],
                          env=env["calm"], capture_output=True, text=True, timeout=600)
    assert calm.returncode == 0, calm.stderr[-2000:]

    stage = subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=roots["killed"],
                             env=env["killed"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    # shards come back as they finish: once one is here, both tasks (3 shards each) are mid-way
    while not list((roots["killed"] / "data").rglob("shard_*.zls")):
        assert stage.poll() is None and time.time() < deadline, "the stage ended before a kill"
        time.sleep(0.05)
    busy = _ray_task_workers(temp)
    assert busy, "no Ray task worker of this cluster was seen playing"
    busy[0].send_signal(signal.SIGKILL)
    err = stage.communicate(timeout=600)[1]
    assert stage.returncode == 0, err[-3000:]
    manifest = json.loads((roots["killed"] / "data/gen_1/manifest.json").read_text())
    assert len(manifest["shards"]) == 6
    killed = digests(roots["killed"], "data/gen_1/shard_*")
    calm = digests(roots["calm"], "data/gen_1/shard_*")
    assert len(killed) == 6 and killed == calm


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory, mlflow_template_db):
    """A real MLflow tracking server on 127.0.0.1: a database backend (sqlite
    here, PostgreSQL for a team) and artifacts proxied to its own folder."""
    store = tmp_path_factory.mktemp("server")
    shutil.copy(mlflow_template_db, store / "mlflow.db")
    server = MlflowServer(f"sqlite:///{store / 'mlflow.db'}", store / "artifacts", workdir=store)
    try:
        yield server.url, store
    finally:
        server.close()


@pytest.fixture(scope="module")
def local_chain(tmp_path_factory, mlflow_server) -> dict:
    """One generation's stages on the local backend in a git repository,
    logging to the tracking server: what the server test reads, and what the
    Ray backend (two tasks at a time) must reproduce byte for byte. One
    process: the games do not depend on the number of workers
    (test_shards), and the stages start no worker processes."""
    url, store = mlflow_server
    root = tmp_path_factory.mktemp("local") / "repo"
    write_params(root, {**TINY, "mlflow": {"experiment": "team"}, "runtime": {"workers": 1}})
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "params"], cwd=root, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                            text=True).stdout.strip()
    run_chain(root, ray_env(MLFLOW_TRACKING_URI=url), gens=1)
    return {"root": root, "commit": commit, "url": url, "store": store}


@pytest.mark.slow
def test_the_pipeline_logs_to_a_tracking_server_with_commit_and_proxied_artifacts(local_chain):
    root, commit, url, store = (local_chain[k] for k in ("root", "commit", "url", "store"))
    assert not (root / "mlflow.db").exists() and not (root / "mlartifacts").exists()  # all went to the server
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    exp = client.get_experiment_by_name("team")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on its runs
    assert exp.artifact_location.startswith("mlflow-artifacts:")  # proxied by the server
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    assert parent.data.tags["mlflow.source.git.commit"] == commit
    child = next(r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id)
    assert {"selfplay/games", "train/loss_epoch", "gate/score"} <= set(child.data.metrics)
    # the self-play sample games went through the server into its artifact store
    names = [a.path for a in client.list_artifacts(child.info.run_id)]
    assert any(n.startswith("selfplay_sample_games") for n in names), names
    stored = list((store / "artifacts").rglob("selfplay_sample_games*"))
    assert stored and stored[0].read_text().strip()


def test_the_cluster_recipe_is_a_valid_ray_cluster_config():
    """deploy/ray-cluster.yaml, as `ray up` reads it: filled out and checked against Ray's schema."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "deploy/ray-cluster.yaml").read_text())
    validate_config(prepare_config(config))
    starts = " ".join(config["head_start_ray_commands"] + config["worker_start_ray_commands"])
    assert starts.count("RAY_AUTH_MODE=token") == 2


def test_backend_params_name_the_backend():
    from zeroloop.pipeline.params import ParamsError
    from zeroloop.pipeline.runtime.backend import Backend

    assert parse_params({"game": "tictactoe"}).runtime.worker_backend() == Backend()
    ray = parse_params({"game": "tictactoe", "runtime": {"backend": "ray", "ray_address": "auto",
                                                         "device": "cpu"}}).runtime.worker_backend()
    assert ray == Backend("ray", "auto", 0.0) and not ray.shares_files  # no GPU asked for on the CPU
    cuda = parse_params({"game": "tictactoe", "runtime": {"backend": "ray", "device": "cuda",
                                                          "ray_gpus_per_task": 0.5}}).runtime.worker_backend()
    assert cuda.gpus_per_task == 0.5
    with pytest.raises(ParamsError, match="runtime.backend"):
        parse_params({"game": "tictactoe", "runtime": {"backend": "slurm"}})


def test_a_shipped_model_loads_where_the_file_is_absent(tmp_path):
    from zeroloop.engine.games import make_game
    from zeroloop.pipeline.data.storage import ShippedFile, load_or_init_net, save_model

    game = make_game("tictactoe")
    net, _ = load_or_init_net(game, None, 3)
    path = tmp_path / "m.pt"
    save_model(path, net, game)
    shipped = ShippedFile(path)
    import pickle

    copy = pickle.loads(pickle.dumps(shipped))
    path.unlink()  # as on another machine
    loaded, _ = load_or_init_net(game, copy, 0)
    for a, b in zip(net.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert (a == b).all()
    assert copy == shipped and Path(copy.local_path()).read_bytes() == shipped.data


@pytest.mark.slow
def test_parallel_tuning_jobs_play_their_games_on_the_ray_cluster(tmp_path, ray_head, mlflow_db):
    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetConfig, PolicyValueNet
    from zeroloop.pipeline.data.storage import save_model

    game = make_game("tictactoe")
    torch.manual_seed(0)
    save_model(tmp_path / "model.pt", PolicyValueNet.for_game(game, NetConfig(blocks=1, channels=8,
                                                                                value_hidden=8)), game)
    write_params(tmp_path, {"game": "tictactoe", "runtime": {"backend": "ray", "ray_address": ray_head},
                            "tune": {"games": 4, "rounds": 1, "simulations": 8, "reference": "random",
                                     "pruner": "none", "confirm_games": 0},
                            "mlflow": {"experiment": "tune-ray"}})
    out = subprocess.run([*ZEROLOOP, "tune", "--trials", "2", "--jobs", "2", "--model",
                          "model.pt", "--storage", "journal:optuna.journal", "--study", "ray"], cwd=tmp_path,
                         env=ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}"), capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("{"), out.stdout[:2000]  # the JSON summary alone
    summary = json.loads(out.stdout)
    assert summary["complete"] == 2 and summary["best"]


@pytest.mark.slow
def test_the_ray_throughput_benchmark_runs_with_tiny_settings_on_the_cluster(ray_head):
    """benchmarks/ray_throughput.py's smoke run (test_benchmarks runs the other scripts'), joining
    this cluster rather than starting a private Ray: about 8 CPU-s less on a Zen 3."""
    args = ["--workers", "1", "--games", "2", "--sims", "4", "--shard-games", "1", "--in-flight", "2",
            "--model", "random", "--rounds", "1", "--address", ray_head]
    out = subprocess.run([*PYTHON, str(BENCHMARKS / "ray_throughput.py"), *args], capture_output=True,
                         text=True, timeout=300, env=ray_env())
    assert out.returncode == 0, out.stderr[-3000:]
    for line in ("local processes", "ray tasks", "ratio ray / local", f"joining {ray_head}",
                 "same games on both backends: yes"):
        assert line in out.stdout, f"no {line!r} in\n{out.stdout}"


def test_the_clusters_messages_go_to_stderr_not_into_a_commands_output(capsys):
    """Ray's driver prints the cluster's error messages (a worker or node that
    died) on stdout; `zeroloop tune` prints its JSON summary there."""
    import ray._private.worker as ray_worker

    from zeroloop.pipeline.runtime.raypool import _cluster_messages_to_stderr

    _cluster_messages_to_stderr()
    _cluster_messages_to_stderr()  # once is enough: no wrapper around the wrapper
    message = {"lines": ["A worker died or was killed"], "pid": "raylet", "is_err": False}
    ray_worker.print_to_stdstream(message, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and "A worker died" in err and "(raylet)" in err


#: Self-play on the cluster with the driver's first streamed shard dropped, as a part the counter
#: took but the driver never got (session 50's "no such shard file"); and the same job locally.
_DROPPED_PART = """
import json, sys
from zeroloop.engine.nn.net import NetConfig
from zeroloop.engine.search import SearchConfig
from zeroloop.engine.selfplay import SelfplayConfig
from zeroloop.pipeline.data.shards import SelfplayJob, run_selfplay
from zeroloop.pipeline.runtime import raypool
from zeroloop.pipeline.runtime.backend import Backend, use_backend

job = SelfplayJob(game="tictactoe", model=None, search=SearchConfig(simulations=6), seed=3, device="cpu",
                  net=NetConfig(blocks=1, channels=8, value_hidden=8),
                  selfplay=SelfplayConfig(games=8, shard_games=2, temperature_moves=4))
run_selfplay(job, workers=1, progress=False, out_dir=sys.argv[2])
dropped, parts = [], raypool.RayPool.parts

def drop_the_first(pool):
    got = parts(pool)
    if got and not dropped:
        dropped.append(got.pop(0)[0])
    return got

raypool.RayPool.parts = drop_the_first
use_backend(Backend(kind="ray", address=sys.argv[1]))
# one task (one Ray worker process, 5-7 CPU-s each): the part dropped is the driver's, whatever the tasks
results, _ = run_selfplay(job, workers=1, progress=False, out_dir=sys.argv[3])
print(json.dumps({"dropped": dropped, "shards": [r.index for r in results]}))
"""


@pytest.mark.slow
def test_a_shard_sent_but_never_taken_is_played_again_with_the_same_games(tmp_path, ray_head):
    """With Ray a task sends each finished shard ahead and lists it as sent;
    one that never reaches the driver is played again (the same seeds, so the
    same bytes), said in a line on stderr, not found missing at the publish."""
    here, there = tmp_path / "local", tmp_path / "ray"
    out = subprocess.run([sys.executable, "-c", _DROPPED_PART, ray_head, str(here), str(there)],
                         env=ray_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(report["dropped"]) == 1 and report["shards"] == [0, 1, 2, 3]
    assert f"1 shard ({report['dropped'][0]}) finished on a worker but never reached" in out.stderr
    assert digests(there, "shard_*") == digests(here, "shard_*") and len(digests(here, "shard_*")) == 4


def test_a_slow_answer_from_the_counter_loses_no_streamed_shard(monkeypatch):
    """The counter actor empties its lists when take() runs, not when its answer
    is read. On a loaded machine the driver's wait can time out first; the next
    look must wait on that same call, not start another (which found the lists
    empty: the shards in the first answer were lost, and the stage ended with
    "no such shard file"); and, that late answer being older than the look,
    ask again after it (the parts sent since were left in the actor)."""
    from ray import exceptions as rex

    from zeroloop.pipeline.runtime import raypool

    calls = []

    class Counter:
        class take:  # noqa: N801 - the actor method's name
            @staticmethod
            def remote():
                calls.append(f"ref{len(calls)}")
                return calls[-1]

    answers = {"ref0": (3, [(0, "node")], [(7, "shard 7")]),
               "ref1": (1, [], [(8, "shard 8")])}  # sent after ref0 ran, before parts() was called
    waits = []

    def get(ref, timeout):
        waits.append(ref)
        if len(waits) == 1:
            raise rex.GetTimeoutError("slow")
        return answers.get(ref, (0, [], []))

    monkeypatch.setattr(raypool.ray, "get", get)
    pool = raypool.RayPool.__new__(raypool.RayPool)
    pool._counter, pool._taking, pool._parts, pool._ticks = Counter(), None, [], 0
    pool._ran_on, pool._retried, pool._head_silent_since, pool._head = {}, [], None, None
    assert pool._take(timeout=0.01) == 0  # timed out: nothing yet
    # the late answer was asked for before the tasks ended: parts() asks again, or shard 8 stayed behind
    assert pool.parts() == [(7, "shard 7"), (8, "shard 8")] and pool._ticks == 4
    assert calls == ["ref0", "ref1"] and waits == ["ref0", "ref0", "ref1"]
