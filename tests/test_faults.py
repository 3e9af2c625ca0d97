"""Faults a user meets, each probed for real: a command run in the wrong
folder, an unreachable Ray cluster, a model file overwritten, a DVC remote
that is gone, a disk that fills up."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from services import BIN, ZEROLOOP, clean_env, free_port, stage, write_params

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def zeroloop(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300):
    return subprocess.run([*ZEROLOOP, *args], cwd=cwd, env=env or clean_env(),
                          capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_experiments_outside_a_project_says_what_is_missing(tmp_path, monkeypatch, capsys):
    from zeroloop.apps.cli import main

    where = tmp_path / "plain"
    where.mkdir()
    steps = [
        (None, "is not in a git repository"),
        (["git", "init", "-q"], "has no commit yet"),
        ([*GIT, "commit", "-q", "--allow-empty", "-m", "x"], "is not in a DVC project"),
    ]
    monkeypatch.chdir(where)
    for i, (cmd, words) in enumerate(steps):
        if cmd:
            subprocess.run(cmd, cwd=where, check=True)
        if i == 0:  # the installed command; then its entry point in this process (a start costs seconds)
            out = zeroloop("experiments", cwd=where)
            code, err = out.returncode, out.stderr
        else:
            code, err = main(["experiments"]), capsys.readouterr().err
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and str(where) in lines[0], err
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=where, check=True)
    subprocess.run([*GIT, "commit", "-qam", "dvc"], cwd=where, check=True)
    out = zeroloop("experiments", cwd=where)
    assert out.returncode == 0 and "no experiment" in out.stdout + out.stderr, out.stderr


TINY = {
    "game": "tictactoe", "seed": 5,
    "net": {"blocks": 1, "channels": 8, "value_hidden": 8},
    "mcts": {"simulations": 8},
    "selfplay": {"games": 16, "shard_games": 4, "temperature_moves": 4},
    "train": {"epochs": 1, "batch_size": 16, "replay_generations": 2},
    "gate": {"games": 8, "simulations": 8, "opening_plies": 1},
    "generations": {"1": {"prev": 0}},
    "runtime": {"workers": 1},
}



@pytest.mark.slow
def test_an_unreachable_ray_address_stops_the_stage_in_seconds_naming_it(tmp_path, mlflow_db):
    port = free_port()  # nothing listens there
    runtime = {"workers": 2, "backend": "ray", "ray_address": f"127.0.0.1:{port}", "ray_connect_timeout_s": 3}
    write_params(tmp_path, {**TINY, "runtime": runtime})
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}")
    stage(tmp_path, env, "init")
    start = time.monotonic()
    out = stage(tmp_path, env, "selfplay", "--gen", "1", "--prev", "0", check=False, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "error" in ln]  # and the progress bar at 0
    assert len(lines) == 1 and f"runtime.ray_address='127.0.0.1:{port}'" in lines[0], out.stderr[-2000:]
    assert "cannot reach a Ray cluster" in lines[0]
    assert time.monotonic() - start < 60  # Ray alone retried for over 6 minutes
    assert not list((tmp_path / "data").glob("gen_1/shard_*"))


@pytest.mark.parametrize("address", ["127.0.0.1", "http://host:6379", "host:port", "host:0"])
@pytest.mark.slow
def test_a_malformed_ray_address_is_refused_by_the_params_check(tmp_path, address):
    write_params(tmp_path, TINY)
    data = yaml.safe_load((tmp_path / "params.yaml").read_text())
    data["runtime"].update(backend="ray", ray_address=address)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(data))
    out = stage(tmp_path, clean_env(), "check", check=False)
    assert out.returncode == 2 and "runtime.ray_address" in out.stderr, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1


def _mount_tmpfs(where: Path, size: str) -> None:
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {out.stderr.strip()}")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"),
                    reason="mounting a small tmpfs needs root")
@pytest.mark.slow
def test_a_disk_filling_up_during_selfplay_gives_one_line_and_a_rerun_finishes_the_same(tmp_path, mlflow_db):
    config = {**TINY, "selfplay": {**TINY["selfplay"], "games": 48}}
    calm, full = tmp_path / "calm", tmp_path / "full"
    env = clean_env(MLFLOW_TRACKING_URI=f"sqlite:///{mlflow_db}")
    for root in (calm, full):
        write_params(root, config)
    stage(calm, env, "init")
    stage(calm, env, "selfplay", "--gen", "1", "--prev", "0")
    (full / "data").mkdir()
    _mount_tmpfs(full / "data", "12k")  # room for a few shards only
    try:
        stage(full, env, "init")
        out = stage(full, env, "selfplay", "--gen", "1", "--prev", "0", check=False)
        assert out.returncode == 2, out.stderr[-2000:]
        assert "Traceback" not in out.stderr
        errors = [ln for ln in out.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1 and "no space left on the device" in errors[0], out.stderr[-2000:]
        assert not list((full / "data").rglob("*.tmp")), "a half-written file was left behind"
        kept = list((full / "data").rglob("shard_*.zls"))
        assert kept  # the shards finished before the disk filled stay
        subprocess.run(["mount", "-o", "remount,size=64m", str(full / "data")], check=True)
        stage(full, env, "selfplay", "--gen", "1", "--prev", "0")
        digest = lambda root: {p.name: p.read_bytes() for p in sorted((root / "data/gen_1").glob("shard_*"))}  # noqa: E731
        assert digest(full) == digest(calm) and len(digest(calm)) == 12
    finally:
        subprocess.run(["umount", str(full / "data")], capture_output=True)
