"""The layer contract (pyproject.toml, [tool.importlinter]) holds, and it can fail."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root / "src"))
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config",
                           str(root / "pyproject.toml")], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_the_layers_hold():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "4 kept, 0 broken" in out.stdout


def _copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "src" / "zeroloop", tmp_path / "src" / "zeroloop",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.slow
def test_an_engine_module_importing_the_pipeline_breaks_the_contract(tmp_path):
    root = _copy(tmp_path)
    (root / "src/zeroloop/engine/leak.py").write_text(
        "from zeroloop.pipeline.data.storage import load_model\n")
    out = lint_imports(root)
    assert out.returncode != 0
    assert "Layers: apps above pipeline above engine BROKEN" in out.stdout
    assert "zeroloop.engine.leak -> zeroloop.pipeline.data.storage" in out.stdout


@pytest.mark.slow
def test_the_engine_may_not_import_mlflow_and_stages_not_each_other(tmp_path):
    root = _copy(tmp_path)
    (root / "src/zeroloop/engine/leak.py").write_text("import mlflow\n")
    (root / "src/zeroloop/pipeline/stages/gate.py").write_text(
        (root / "src/zeroloop/pipeline/stages/gate.py").read_text()
        + "\nfrom zeroloop.pipeline.stages import train\n")
    out = lint_imports(root)
    assert out.returncode != 0
    assert "The engine imports no MLOps tool, trainer, web or cluster framework BROKEN" in out.stdout
    assert "Stages are entry points: no stage imports another BROKEN" in out.stdout


@pytest.mark.slow
def test_an_import_cycle_breaks_the_contract(tmp_path):
    # the circle this contract was written after: the Ray pool importing the local pools,
    # which import the Ray pool when runtime.backend is ray
    root = _copy(tmp_path)
    ray = root / "src/zeroloop/pipeline/runtime/raypool.py"
    ray.write_text(ray.read_text() + "\nfrom zeroloop.pipeline.runtime import workers  # noqa\n")
    out = lint_imports(root)
    assert out.returncode != 0
    assert "No import cycles between sibling modules or packages BROKEN" in out.stdout
    assert ".workers -> .raypool" in out.stdout


def test_every_stage_is_in_the_independence_contract():
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = next(c for c in config if c["type"] == "independence")["modules"]
    stages = sorted(p.stem for p in (ROOT / "src/zeroloop/pipeline/stages").glob("*.py")
                    if p.stem not in ("__init__", "__main__", "common"))
    assert sorted(m.rsplit(".", 1)[1] for m in listed) == stages
