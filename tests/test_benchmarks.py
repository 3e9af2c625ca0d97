"""Every script in benchmarks/ runs end to end with tiny settings, so an API
change that breaks one fails the suite (they measure nothing here: speed
lives in the benchmarks themselves, not in tests)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

# script -> (tiny arguments, lines its output must contain)
SMOKE = {
    "inference_options.py": (
        ["--seconds", "0.05", "--batches", "1,2", "--positions", "0", "--only", "BN folded"],
        ["eager fp32", "BN folded", "max dprior"]),
    "selfplay_throughput.py": (
        ["--workers", "1", "--games", "3", "--sims", "4", "--shard-games", "2", "--in-flight", "2",
         "--eval-batch", "4", "--model", "random", "--blocks", "1", "--channels", "8", "--warmup", "0.1",
         "--precision", "bf16"],
        ["self-play before", "self-play after", "speed-up", "network only", "ratio", "cache hits",
         "time split"]),
    "ray_throughput.py": (
        ["--workers", "1", "--games", "2", "--sims", "4", "--shard-games", "1", "--in-flight", "2",
         "--model", "random", "--rounds", "1"],
        ["local processes", "ray tasks", "ratio ray / local", "same games on both backends: yes"]),
    "train_throughput.py": (
        ["--samples", "64", "--batch", "32", "--threads", "1", "--blocks", "1", "--channels", "8"],
        ["raw PyTorch loop", "Lightning fit", "ratio Lightning / raw"]),
}


def test_every_benchmark_has_a_smoke_test():
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == sorted(SMOKE)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_runs_with_tiny_settings(script):
    args, expected = SMOKE[script]
    out = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for line in expected:
        assert line in out.stdout, f"{script}: no {line!r} in\n{out.stdout}"
