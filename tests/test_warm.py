"""The suite's warm stage server (tests/warm.py) stands in for a new interpreter
only where it gives the same result: the same files byte for byte, the exit
status, the signals, a stage that does not outlive its caller; and it hands a
request whose environment it cannot honour back to a real interpreter."""

import hashlib
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from services import STAGES, write_params

TINY = {"game": "tictactoe", "seed": 3, "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
        "mcts": {"simulations": 8}, "selfplay": {"games": 6, "shard_games": 2},
        "generations": {"1": {"prev": 0}}, "runtime": {"workers": 1}}


@pytest.fixture
def warm(_warm_stages):
    if _warm_stages is None:
        pytest.skip("ZEROLOOP_TEST_COLD is set: no warm server")
    assert _warm_stages.ready(), (_warm_stages.root / "warm.log").read_text()
    return _warm_stages


def _log_lines(server, kind: str, cwd) -> list[str]:
    """The server's lines of one kind for requests from ``cwd`` (the other test process shares it)."""
    return [x for x in (server.root / "warm.log").read_text().splitlines() if x.startswith(f"{kind} {cwd} ")]


def _digests(root) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for sub in ("models", "data") for p in sorted((root / sub).rglob("*")) if p.is_file()}


def _processes_in(root, *besides: int) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cwd"]) if p.info["cwd"] == str(root) and p.pid not in besides]


def test_a_warm_stage_writes_what_a_new_interpreter_writes(tmp_path, warm, mlflow_db):
    """... and its pool's workers, spawned through the shim, are forks of the server too."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    roots = {"cold": tmp_path / "cold", "warm": tmp_path / "warm"}
    forks = len(_log_lines(warm, "fork:", roots["warm"]))
    for kind, python in (("cold", sys.executable), ("warm", warm.python)):
        write_params(roots[kind], {**TINY, "runtime": {"workers": 2}})
        for args in (["init"], ["selfplay", "--gen", "1", "--prev", "0"]):
            out = subprocess.run([python, "-m", "zeroloop.pipeline.stages", *args], cwd=roots[kind], env=env,
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
    assert len(_log_lines(warm, "fork:", roots["warm"])) == forks + 2  # the warm ones were forks
    assert len(_log_lines(warm, "spawn:", roots["warm"])) == 2  # and so were self-play's two workers
    assert not _log_lines(warm, "spawn:", roots["cold"])
    cold, hot = _digests(roots["cold"]), _digests(roots["warm"])
    assert any(k.endswith(".zls") for k in cold) and cold == hot


def test_exit_status_and_a_changed_import_time_setting(tmp_path, warm):
    (tmp_path / "params.yaml").write_text("game: tictactoe\nmcts:\n  cpuct: 2.0\n")
    out = subprocess.run([*STAGES, "init"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown key 'mcts.cpuct'" in out.stderr
    # a thread count read when torch starts: the server's was set at its own start, so a real one runs it
    out = subprocess.run([*STAGES, "init"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OMP_NUM_THREADS": "3"})
    assert out.returncode == 2 and "unknown key 'mcts.cpuct'" in out.stderr
    assert _log_lines(warm, "real:", tmp_path)[-1].endswith("(differs: OMP_NUM_THREADS )")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_caller_reaches_the_stage(tmp_path, warm, mlflow_db, sig):
    # minutes of games, on two workers that are forks of the server too: neither outlives the stage
    write_params(tmp_path, {**TINY, "selfplay": {"games": 50000, "shard_games": 50},
                            "runtime": {"workers": 2}})
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    assert subprocess.run([*STAGES, "init"], cwd=tmp_path, env=env, timeout=120).returncode == 0
    proc = subprocess.Popen([*STAGES, "selfplay", "--gen", "1", "--prev", "0"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((tmp_path / "data").rglob("shard_*.zls")):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.1)
    stages = _processes_in(tmp_path, proc.pid, os.getpid())
    assert len(stages) >= 3, f"the stage and its workers are not processes of their own: {stages}"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=15)  # the stage holds stderr open while it lives
    assert proc.returncode == -sig, err[-3000:]  # a stage dies of SIGTERM, as a new interpreter does
    gone, alive = psutil.wait_procs(stages, timeout=10)
    assert not alive, f"the stage outlived its caller: {alive}"


def test_a_benchmark_script_runs_warm_as_a_new_interpreter_runs_it(tmp_path, warm):
    """``python benchmarks/NAME.py``: the script sees the same argv, file and
    import path as under a new interpreter (its --help names it by them), and
    a script elsewhere runs in a real interpreter."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "run_as.py"
    forks = len(_log_lines(warm, "fork:", tmp_path))
    cold, hot = (subprocess.run([python, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                                timeout=120) for python in (sys.executable, warm.python))
    assert cold.returncode == hot.returncode == 0 and "run_as.py" in cold.stdout
    assert hot.stdout == cold.stdout and hot.stderr == cold.stderr
    assert len(_log_lines(warm, "fork:", tmp_path)) == forks + 1
    elsewhere = tmp_path / "probe.py"
    elsewhere.write_text("import sys; print(sys.argv[0])\n")
    out = subprocess.run([warm.python, str(elsewhere)], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == str(elsewhere) and len(_log_lines(warm, "fork:", tmp_path)) == forks + 1
