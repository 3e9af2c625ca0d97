import pytest

#: Modules whose module-scoped fixture starts a cluster or a server, or runs
#: stages that several tests then read: their tests stay in one pytest-xdist
#: worker (``--dist loadgroup``), which does that once.
#: The two that start Ray clusters and kill their nodes share one worker: two
#: clusters at once on two cores starve each other's health checks.
_ONE_WORKER = {"test_cluster": "ray", "test_ray_nodes": "ray", "test_team_servers": "team_servers",
               "test_server_limits": "server_limits", "test_tracking": "tracking"}
#: ... except, in these modules, the tests that use none of the shared servers: they
#: go wherever a worker is free (the team-server module's group was a 15-minute pole).
_SHARED = {"test_team_servers": {"postgres", "pg_mlflow", "auth_server"}}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        group = _ONE_WORKER.get(module)
        if group is not None and (module not in _SHARED or _SHARED[module] & set(item.fixturenames)):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True, scope="session")
def _warm_stages(tmp_path_factory):
    """Stages and ``zeroloop`` commands run as forks of one warm interpreter per
    test process (tests/warm.py: each is still a process of its own, without the
    seconds of imports); ``ZEROLOOP_TEST_COLD=1`` runs them all as new interpreters."""
    import os

    import services

    if os.environ.get("ZEROLOOP_TEST_COLD"):
        yield None
        return
    from warm import WarmServer

    # every zeroloop process sets this before torch starts (runtime.process.init_worker_threads), and an
    # in-process test sets it in this process: set once first, the server and its requests agree on it
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server = WarmServer(tmp_path_factory.mktemp("warm"))
    cold = (list(services.PYTHON), list(services.STAGES), list(services.ZEROLOOP))
    services.PYTHON[:] = [server.python]
    services.STAGES[:] = [server.python, *services.STAGES[1:]]
    services.ZEROLOOP[:] = [server.zeroloop]
    services.WARM_BIN[:] = [str(server.bin)]
    yield server
    services.PYTHON[:], services.STAGES[:], services.ZEROLOOP[:] = cold
    services.WARM_BIN.clear()
    server.close()


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
