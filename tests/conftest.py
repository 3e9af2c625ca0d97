import pytest

#: Modules whose module-scoped fixture starts a cluster or a server: their tests
#: stay in one pytest-xdist worker (``--dist loadgroup``), which starts it once.
_ONE_WORKER = {"test_cluster", "test_ray_nodes", "test_team_servers", "test_server_limits"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        if module in _ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(module))


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
    import shutil

    dest = tmp_path / "mlflow.db"
    shutil.copy(mlflow_template_db, dest)
    return dest
