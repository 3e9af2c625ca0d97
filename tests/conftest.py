import platform
import shutil

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One torch thread, as the workers use (set here, never at import time)."""
    import torch

    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def mlflow_template_db(tmp_path_factory):
    """An empty MLflow sqlite store, created once (creating one takes seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def mlflow_db(tmp_path, mlflow_template_db):
    """A fresh copy of the template store for one test: its path."""
    dest = tmp_path / "mlflow.db"
    shutil.copy(mlflow_template_db, dest)
    return dest


def pytest_report_header(config):
    """The CPU the suite runs on: durations mean little without it."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next((line.partition(":")[2].strip() for line in f if line.startswith("model name")), name)
    except OSError:
        pass
    return f"CPU: {name}"
