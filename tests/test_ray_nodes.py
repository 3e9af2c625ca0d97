"""A real multi-node Ray cluster on one machine: a head with no CPU for tasks
and two worker nodes with one CPU each (`ray start --head` then `ray start
--address` twice, token auth on), so every task runs on a worker node and
two at once means one on each. Self-play across it gives the local backend's
bytes even when a whole worker node is killed mid-stage; a head node dying
ends the stage in one line, and a rerun resumes."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from services import BIN, STAGES, clean_env, free_port, kill_all, ray_processes
from zeroloop.pipeline.params import parse_params

TOKEN = secrets.token_hex(32)

TINY = {
    "game": "connect4", "seed": 11,  # long enough games that a node dies while they are played
    "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
    "mcts": {"simulations": 40},
    "selfplay": {"games": 64, "shard_games": 4, "temperature_moves": 4},
    "train": {"epochs": 1, "batch_size": 16, "replay_generations": 2},
    "gate": {"games": 8, "simulations": 8, "opening_plies": 1},
    "generations": {"1": {"prev": 0}},
}


def ray_env(**extra: str) -> dict:
    return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN, **extra)


#: The head finds a dead node within ~2 s (Ray's defaults: 3 s x 5 failed health checks)
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
                      "RAY_health_check_failure_threshold": "3"}


def ray(*args: str) -> None:
    out = subprocess.run([str(BIN / "ray"), *args], env=ray_env(**FAST_HEALTH_CHECKS), capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster():
    """Head (0 CPUs) + two worker nodes (1 CPU each) on 127.0.0.1; yields
    (address, temp dir). The nodes share the temp dir, each its own sockets."""
    temp = tempfile.mkdtemp(prefix="zn", dir="/tmp")  # short: Ray's socket paths have a length limit
    port = free_port()
    common = ["--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--object-store-memory=100000000",
              "--disable-usage-stats"]
    try:
        ray("start", "--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", *common)
        for _ in range(2):
            ray("start", f"--address=127.0.0.1:{port}", "--num-cpus=1", *common)
        ask = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
               "print(json.dumps(sorted(n['Resources'].get('CPU', 0) for n in ray.nodes() if n['Alive'])))")
        out = subprocess.run([sys.executable, "-c", ask % f"127.0.0.1:{port}"], env=ray_env(),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        # two tasks at once can only run one on each worker node
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, 1, 1]
        yield f"127.0.0.1:{port}", temp
    finally:
        kill_all(ray_processes(temp))
        shutil.rmtree(temp, ignore_errors=True)


def _second_node(temp: str) -> list[psutil.Process]:
    """The second worker node's raylet (socket `raylet.2`), the processes it
    started, and the task workers bound to it."""
    name = str((Path(temp) / "session_latest").resolve() / "sockets" / "raylet.2")
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(arg.endswith("=" + name) or arg == name for arg in cmd):
            found.append(p)
            found += p.children(recursive=True)
    return found


def _kill_worker_node(temp: str) -> None:
    victims = _second_node(temp)
    assert victims, "no process of the second worker node"
    for p in victims:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def write_params(root: Path, runtime: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    data = parse_params({**TINY, "runtime": {"workers": 2, **runtime}}).to_yaml_data()
    (root / "params.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


def shards(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / "data/gen_1").glob("shard_*"))}


def run(root: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([*STAGES, *args], cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"{args}:\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def local_shards(tmp_path_factory, mlflow_template_db):
    root = tmp_path_factory.mktemp("local")
    write_params(root, {"backend": "local", "workers": 1})  # the same games as two workers (test_shards)
    env = ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}")
    shutil.copy(mlflow_template_db, root / "mlflow.db")
    run(root, env, "init")
    run(root, env, "selfplay", "--gen", "1", "--prev", "0")
    return shards(root)


class Selfplay:
    """Generation 1's self-play stage running in ``root``, its stderr collected."""

    def __init__(self, root: Path, env: dict) -> None:
        self.root = root
        self.proc = subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=root, env=env,
                                     stderr=subprocess.PIPE, text=True)
        self.chunks: list[str] = []
        read = lambda: self.proc.stderr.read(64)  # noqa: E731
        self.reader = threading.Thread(target=lambda: self.chunks.extend(iter(read, "")))
        self.reader.start()

    def wait_for_shards(self, n: int) -> None:
        """Until ``n`` shards are on disk (they come back as they finish)."""
        deadline = time.time() + 180
        while len(list((self.root / "data").rglob("shard_*.zls"))) < n:
            assert self.proc.poll() is None and time.time() < deadline, "".join(self.chunks)[-3000:]
            time.sleep(0.05)

    def finish(self, timeout: float) -> str:
        """Its stderr, once it has ended."""
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=30)
        return "".join(self.chunks)


@pytest.mark.slow
def test_a_worker_node_killed_mid_stage_costs_nothing_but_time(tmp_path, cluster, local_shards, mlflow_db):
    address, temp = cluster
    write_params(tmp_path, {"backend": "ray", "ray_address": address})
    env = ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}")
    run(tmp_path, env, "init")
    stage = Selfplay(tmp_path, env)
    # a shard is back: both worker nodes are mid-task (8 shards each; with 4, a node on a busy
    # CPU once finished its task before the kill)
    stage.wait_for_shards(1)
    _kill_worker_node(temp)
    err = stage.finish(timeout=600)
    assert stage.proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    lost = [ln for ln in err.splitlines() if "[ray] lost node " in ln]  # after the bar's \r
    assert len(lost) == 1, err[-6000:]
    assert re.search(r"\[ray\] \d+ task runs on 2 nodes", err), err[-3000:]  # both worker nodes took tasks
    assert shards(tmp_path) == local_shards  # the same bytes: nothing lost, nothing duplicated

    manifest = json.loads((tmp_path / "data/gen_1/manifest.json").read_text())
    assert len(manifest["shards"]) == 16


@pytest.mark.slow
def test_the_head_node_dying_ends_the_stage_in_one_line_and_a_rerun_resumes(tmp_path, local_shards,
                                                                             mlflow_db):
    """A cluster of one node (its head, one CPU) dies mid-stage: the stage
    stops within ``ray_connect_timeout_s`` with one line naming the head, the
    shards that came back are on disk, and a rerun plays only the rest."""
    temp = tempfile.mkdtemp(prefix="zh", dir="/tmp")
    port = free_port()
    try:
        ray("start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false",
            "--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--object-store-memory=100000000",
            "--disable-usage-stats")
        write_params(tmp_path, {"backend": "ray", "ray_address": f"127.0.0.1:{port}",
                                "ray_connect_timeout_s": 5})
        env = ray_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}")
        run(tmp_path, env, "init")
        stage = Selfplay(tmp_path, env)
        stage.wait_for_shards(2)
        kill_all(ray_processes(temp))
        killed = time.time()
        err = stage.finish(timeout=120)
        assert stage.proc.returncode == 2, err[-3000:]
        assert time.time() - killed < 60, err[-3000:]  # Ray's own wait alone is 60 s
        assert "Traceback" not in err
        said = [ln for ln in err.splitlines() if "error:" in ln]
        assert len(said) == 1, err[-3000:]
        assert f"Ray head node at 127.0.0.1:{port} stopped answering" in said[0]
        scratch = {p.name for p in tmp_path.rglob("shard_*.zls")}
        assert 2 <= len(scratch) < len(local_shards), err[-3000:]
    finally:
        kill_all(ray_processes(temp))
        shutil.rmtree(temp, ignore_errors=True)

    # the rerun (here on the local backend: shards do not depend on it) plays only the rest
    write_params(tmp_path, {"backend": "local", "workers": 1})
    out = run(tmp_path, env, "selfplay", "--gen", "1", "--prev", "0")
    assert f"({len(scratch)} shards kept)" in out.stderr, out.stderr[-2000:]
    assert shards(tmp_path) == local_shards
