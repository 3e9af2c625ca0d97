"""Worker processes die with their stage, and a dead worker is reported in one line."""

import ast
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from services import STAGES, clean_env
from zeroloop.pipeline.params import parse_params


def _spawned_in(root: Path) -> list[int]:
    """The spawned Python processes (multiprocessing's ``spawn_main``) working in
    ``root``: a stage's workers there, whoever started the stage."""
    out, where = [], root.resolve()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cwd").resolve() == where and b"spawn_main" in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _workers(stage: subprocess.Popen, count: int, root: Path, timeout: float = 120) -> list[int]:
    """The stage's worker processes, once ``count`` exist and shards are being written."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        kids = _spawned_in(root)
        if len(kids) >= count and len(_shards(root)) >= 2:
            return kids
        time.sleep(0.1)
    stage.kill()
    raise AssertionError(f"no {count} workers appeared: {stage.communicate()[1][-2000:]}")


@pytest.fixture
def selfplay_repo(tmp_path, mlflow_db):
    data = parse_params({"game": "connect4", "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
                         "mcts": {"simulations": 32}, "selfplay": {"games": 80, "shard_games": 10},
                         "runtime": {"workers": 2}, "generations": {"1": {"prev": 0}}}).to_yaml_data()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{mlflow_db}"}
    assert subprocess.run([*STAGES, "init"], cwd=tmp_path, env=env, capture_output=True).returncode == 0

    def start(new_interpreter: bool = True) -> subprocess.Popen:
        """Self-play; in a new interpreter where how its workers end with it is tested (a warm fork
        is ended with its process group), else as the other stages run (without the seconds of imports)."""
        run = [sys.executable, "-m", "zeroloop.pipeline.stages"] if new_interpreter else STAGES
        return subprocess.Popen([*run, "selfplay", "--gen", "1", "--prev", "0"], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    return tmp_path, start


def _shards(root: Path) -> set[str]:
    return {p.name for p in (root / "data" / ".partial").glob("*/shard_*.zls")}


@pytest.mark.slow
def test_workers_die_with_a_killed_stage_and_write_nothing_after(selfplay_repo):
    root, start = selfplay_repo
    stage = start()
    workers = _workers(stage, 2, root)
    stage.send_signal(signal.SIGKILL)
    stage.wait(timeout=10)
    deadline = time.time() + 10
    while any(_alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "workers outlived their stage"
    before = _shards(root)
    time.sleep(2)
    assert _shards(root) == before, "shards written after the stage was killed"


@pytest.mark.slow
def test_a_killed_worker_is_one_line_and_a_rerun_resumes(selfplay_repo):
    root, start = selfplay_repo
    stage = start(new_interpreter=False)
    workers = _workers(stage, 2, root)
    os.kill(workers[0], signal.SIGKILL)
    _, err = stage.communicate(timeout=120)
    assert stage.returncode == 2, err[-2000:]
    assert "Traceback" not in err and "a worker process died" in err
    kept = _shards(root)
    rerun = start(new_interpreter=False)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-2000:]
    assert len(list((root / "data/gen_1").glob("shard_*.zls"))) == 8
    assert "shards kept" in err and kept  # the finished shards were not played again


@pytest.mark.slow
def test_stages_and_workers_skip_the_collection_at_exit():
    """A stage or worker ends without collecting its objects (1.5-2 s each with torch
    and MLflow loaded): gc.freeze is an exit hook. Exit hooks run last registered
    first, so one registered before it sees whether the freeze ran."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('frozen', gc.get_freeze_count(), file=sys.stderr))\n"
            "from zeroloop.pipeline.runtime import process, workers\n"
            "{call}\n")
    for call in ("process.setup_process()", "workers._init_process(None, __import__('os').getppid())"):
        out = subprocess.run([sys.executable, "-c", code.format(call=call)], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        frozen = int(out.stderr.split("frozen")[1].split()[0])
        assert frozen > 10_000, (call, out.stderr)  # torch alone leaves ~100k objects
    plain = subprocess.run([sys.executable, "-c", code.format(call="pass")], capture_output=True, text=True,
                           timeout=120)
    assert "frozen 0" in plain.stderr  # the check can fail


@pytest.mark.slow
def test_commands_and_stages_import_without_collecting_then_freeze_the_imports(tmp_path):
    """A stage (``python -m zeroloop.pipeline.stages``) and a command
    (``zeroloop``) import torch and MLflow with the collector off (its full
    passes over the growing heap were 1.5 CPU-s of each process's start on a
    Zen 3), then freeze what they imported and turn it back on when the work
    begins: every full pass after that sees only what the work made. Before,
    the same stage made four full passes over its unfrozen imports."""
    shutil.copy(Path(__file__).resolve().parents[1] / "params.yaml", tmp_path / "params.yaml")
    code = ("import atexit, gc, runpy, sys\n"
            "passes = []\n"
            "gc.callbacks.append(lambda phase, info: passes.append(gc.get_freeze_count())\n"
            "                    if phase == 'start' and info['generation'] == 2 else None)\n"
            "atexit.register(lambda: print('passes', passes, 'enabled', gc.isenabled(), file=sys.stderr))\n"
            "sys.argv = {argv!r}\n"
            "{run}\n"
            "gc.collect()  # a full pass once the work is done\n")
    ends = ("try:\n    runpy.run_module({!r}, run_name='__main__', alter_sys=True)\n"
            "except SystemExit:\n    pass\n")
    runs = {"stage": (ends.format("zeroloop.pipeline.stages"), ["stages", "check"]),
            "command": (ends.format("zeroloop"), ["zeroloop", "check"])}
    seen = {}
    for name, (run, argv) in runs.items():
        out = subprocess.run([sys.executable, "-c", code.format(argv=argv, run=run)], cwd=tmp_path,
                             capture_output=True, text=True, timeout=180, env=clean_env())
        assert out.returncode == 0, (name, out.stderr[-2000:])
        line = out.stderr[out.stderr.rindex("passes"):]
        seen[name] = ast.literal_eval(line.split("passes", 1)[1].split("enabled")[0])  # frozen, a pass
        assert line.split()[-1] == "True", (name, line)  # the collector is on again
    for name in ("stage", "command"):
        assert seen[name] and all(frozen > 100_000 for frozen in seen[name]), (name, seen[name])


def _pid_task(task, tick):
    if task == "fail":
        raise ValueError("this task fails")
    return os.getpid()


def test_calls_inside_keep_workers_share_their_worker_processes():
    """A study's rounds and a stage's matches reuse one set of worker processes
    (each costs seconds of imports); a call that failed leaves no half-used
    worker to the next, and none outlives the block."""
    from zeroloop.pipeline.runtime.workers import keep_workers, run_tasks

    def pids(tasks) -> set[int]:
        return set(run_tasks(_pid_task, tasks, workers=2, progress=False))

    with keep_workers():
        kept = pids(range(4)) | pids(range(6)) | pids(range(3))
        assert len(kept) <= 2 and os.getpid() not in kept
        # a stage's clock counts the workers it keeps running, not only those it joined
        import psutil

        from zeroloop.pipeline.runtime.process import process_clock

        mine = psutil.Process().cpu_times()
        workers = sum(sum(psutil.Process(p).cpu_times()[:2]) for p in kept)
        assert workers > 0.5  # each imported torch at least
        own = mine.user + mine.system + mine.children_user + mine.children_system
        assert process_clock()["stage_cpu_s"] >= own + workers - 0.2  # rounded to 0.1
        with pytest.raises(ValueError, match="this task fails"):
            run_tasks(_pid_task, [0, "fail", 1], workers=2, progress=False)
        after = pids(range(4))
        assert not after & kept
    time.sleep(0.5)
    assert not [p for p in kept | after if _alive(p)]
