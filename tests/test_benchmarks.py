"""Every script in benchmarks/ runs end to end with tiny settings, so an API
change that breaks one fails the suite (they measure nothing here: speed
lives in the benchmarks themselves, not in tests)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services import PYTHON

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# script -> (tiny arguments, lines its output must contain)
SMOKE = {
    "selfplay_throughput.py": (
        ["--workers", "1", "--games", "3", "--sims", "4", "--shard-games", "2", "--in-flight", "2",
         "--eval-batch", "4", "--model", "random", "--net", "mlp:1x8", "--warmup", "0.1",
         "--precision", "int8"],
        ["net untrained mlp:1x8", "self-play before", "self-play after fp32", "self-play after int8",
         "speed-up", "int8 over fp32, same run", "network int8", "network fp32", "cache hits", "time split"]),
    "selfplay_ceiling.py": (
        ["--nets", "const,1x8,1x8@states", "--games", "3", "--in-flight", "2", "--sims", "4",
         "--eval-batch", "4", "--shard-games", "2", "--seconds", "0", "--precision", "int8"],
        ["machine: network int8 (precision int8)", "budget per net: one round", "const         :",
         "1x8 int8      :", "simulations/s", "positions/s (moves per CPU-second", "cache hits",
         "| part | const | 1x8 int8 | 1x8 int8 states |", "| encoding | ", "| cache | ", "| batching | ",
         "| network | ",
         "| tree | ", "| rules | ", "| move choice | ", "| records | ", "| other | ", "| **total** | ",
         "network share (the network call, of self-play's wall): const ", "coarse split (SearchStats",
         "ratio to const (simulations/s, this run): 1x8 int8 ",
         "1x8 int8 states against 1x8 int8 (over rows): same games: yes (the first 3)",
         "evaluator untimed, const again (1 round(s), same seeds): same games: yes"]),
    "precision_match.py": (
        ["--games", "2", "--sims", "2", "--workers", "1"],
        ["machine: network int8", "int8 against fp32: score", "pairs scoring 0, 1/4, 1/2, 3/4, 1"]),
    "rollout_uct.py": (
        ["--games", "2", "--playouts", "20", "--sims", "4"],
        ["generic playouts", "fast playouts", "UCT kernel", "speed-up of the match",
         "(fast playouts / UCT kernel)", "same games all 3 ways: yes"]),
    "go_rules.py": (
        ["--sizes", "5", "--seconds", "0.05", "--games", "2", "--sims", "4"],
        ["go-5: rules", "numba kernels", "kernels/chains", "same legal moves: yes", "go-5 self-play",
         "simulations/s", "time split"]),
    "gate_simulation.py": (
        ["--matches", "20", "--elo", "0", "70"],
        ["chance of promotion / mean games played", "| fixed 40 games |", "| SPRT width"]),
    "net_sizes.py": (
        ["--nets", "1x8,gpool:2x8,gpool:2x8/4x8,mlp:2x16", "--seconds", "0.01", "--batch", "4",
         "--train-batch", "8", "--precision", "int8", "--device", "cpu"],
        ["machine: network int8 (precision int8)", "1x8: ", "gpool 2x8: ", "gpool 2x8/4x8: ", "mlp 2x16: ",
         "MFLOP a position", "positions/s", "samples/s", "ratio to 1x8 (this run)", "| gpool 2x8 | ",
         "| gpool 2x8/4x8 | ", "| mlp 2x16 | "]),
    "train_throughput.py": (
        ["--samples", "64", "--batch", "32", "--threads", "1", "--blocks", "1", "--channels", "8"],
        ["raw PyTorch loop, NCHW", "raw PyTorch loop, channels-last", "Lightning fit",
         "ratio channels-last / NCHW (raw)", "ratio Lightning / raw channels-last"]),
}


#: scripts whose smoke run joins a module's cluster or server, in that module
ELSEWHERE = {"ray_throughput.py": "test_cluster.py"}


def test_every_benchmark_has_a_smoke_test():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted([*SMOKE, *ELSEWHERE])
    assert all(f'BENCHMARKS / "{script}"' in (Path(__file__).parent / test).read_text()
               for script, test in ELSEWHERE.items())
    assert sorted(p.name for p in BENCHMARKS.glob("*.sh")) == ["gpu_check.sh", "gpu_wheels.sh"]


def _gpu_check(tmp_path, env):
    return subprocess.run(["bash", str(BENCHMARKS / "gpu_check.sh"), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.slow
def test_gpu_check_prepares_its_run_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.sh, the GPU checks prepared for a lent machine, with
    its cheap steps on the CPU: it names the machine and makes the scratch
    repository whose params.yaml (device, workers, games, generations) loads."""
    import yaml

    env = {**os.environ, "GPU_CHECK_STEPS": "machine params", "GPU_CHECK_DEVICE": "cpu",
           "GPU_CHECK_GAMES": "7", "GPU_CHECK_GENERATIONS": "3", "PYTHON": sys.executable,
           "TMPDIR": str(tmp_path), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = _gpu_check(tmp_path, env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for line in ("== machine", "machine: network", "params.yaml: runtime", "== all passed"):
        assert line in out.stdout, f"no {line!r} in\n{out.stdout}"
    assert (tmp_path / "out" / "gpu_check.log").read_text() == out.stdout
    (run,) = tmp_path.glob("gpu_check_run.*")
    p = yaml.safe_load((run / "params.yaml").read_text())
    assert (p["runtime"]["device"], p["runtime"]["workers"], p["selfplay"]["games"]) == ("cpu", 4, 7)
    assert list(p["generations"]) == ["1", "2", "3"]
    head = subprocess.run(["git", "-C", str(run), "log", "--format=%s"], capture_output=True, text=True)
    assert head.stdout.strip() == "gpu check"
    assert (run / "dvc.yaml").is_file() and not (run / ".venv").exists()


@pytest.mark.slow
def test_gpu_check_refuses_a_wrong_params_key(tmp_path):
    """A step that fails says so, and the check as a whole fails."""
    env = {**os.environ, "GPU_CHECK_STEPS": "params", "GPU_CHECK_DEVICE": "tpu", "PYTHON": sys.executable,
           "TMPDIR": str(tmp_path)}
    out = _gpu_check(tmp_path, env)
    assert out.returncode != 0
    assert "tpu" in out.stdout + out.stderr


@pytest.mark.slow
def test_gpu_wheels_help():
    out = subprocess.run(["bash", str(BENCHMARKS / "gpu_wheels.sh"), "--help"], capture_output=True,
                         text=True)
    assert out.returncode == 0 and "--python" in out.stdout
    bad = subprocess.run(["bash", str(BENCHMARKS / "gpu_wheels.sh"), "--pyhton", "3.12"], capture_output=True,
                         text=True)
    assert bad.returncode == 2 and "unknown option --pyhton" in bad.stdout


@pytest.mark.parametrize("script", sorted(SMOKE))
@pytest.mark.slow
def test_benchmark_runs_with_tiny_settings(script):
    args, expected = SMOKE[script]
    out = subprocess.run([*PYTHON, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in expected:
        assert line in out.stdout, f"{script}: no {line!r} in\n{out.stdout}"


@pytest.mark.slow
def test_selfplay_ceiling_refuses_a_net_it_does_not_know():
    out = subprocess.run([*PYTHON, str(BENCHMARKS / "selfplay_ceiling.py"), "--nets", "const,mlp9"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--nets 'mlp9': expected const" in out.stderr


@pytest.mark.slow
def test_net_sizes_refuses_a_device_it_does_not_know():
    out = subprocess.run([*PYTHON, str(BENCHMARKS / "net_sizes.py"), "--device", "tpu", "--nets",
                          "1x8"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "device 'tpu': expected auto, cpu or cuda[:N]" in out.stderr


def _gate_simulation():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gate_simulation", BENCHMARKS / "gate_simulation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_gate_simulation_model_and_a_known_answer():
    """The simulation's games have the strength, draws and colour effect asked
    for, and a fixed 40-game gate between equals without draws or colour
    effect passes exactly as often as Binomial(40, 1/2) reaches 22 wins."""
    from math import comb

    from zeroloop.engine.rating import expected_score

    sim = _gate_simulation()
    m = sim.GameModel.fit(70.0, 0.2, 0.7)
    (w1, d1, _), (w2, d2, _) = m.first, m.second
    assert (w1 + d1 / 2 + w2 + d2 / 2) / 2 == pytest.approx(expected_score(70.0), abs=1e-6)
    even = sim.GameModel.fit(0.0, 0.2, 0.7)
    assert (even.first[1] + even.second[1]) / 2 == pytest.approx(0.2, abs=1e-6)
    assert even.first[0] + even.first[1] / 2 == pytest.approx(0.7, abs=1e-6)
    exact = sum(comb(40, k) for k in range(22, 41)) / 2**40  # 0.318
    rule = next(r for r in sim.rules() if r.name == "fixed 40 games")
    share, games = sim.simulate(rule, sim.GameModel.fit(0.0, 0.0, 0.5), 4000, seed=1)
    assert games == 40 and share == pytest.approx(exact, abs=4 * (0.25 / 4000) ** 0.5)
