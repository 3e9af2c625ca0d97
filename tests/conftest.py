import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: Modules whose module-scoped fixture starts a cluster or a server, or runs
#: stages that several tests then read: their tests stay in one pytest-xdist
#: worker (``--dist loadgroup``), which does that once.
#: The two that start Ray clusters and kill their nodes share one worker: two
#: clusters at once on two cores starve each other's health checks.
#: test_isa_emulation's patched library copy is 17-21 CPU-s of disassembly: built once.
_ONE_WORKER = {"test_cluster": "ray", "test_ray_nodes": "ray", "test_team_servers": "team_servers",
               "test_server_limits": "server_limits", "test_tracking": "tracking",
               "test_isa_emulation": "isa"}
#: ... except, in these modules, the tests that use none of the shared servers: they
#: go wherever a worker is free (the team-server module's group was a 15-minute pole).
_SHARED = {"test_team_servers": {"postgres", "pg_mlflow", "auth_server"}}
#: where the test processes leave each test's group for the scheduler (below)
_GROUPS_DIR = "ZEROLOOP_XDIST_GROUPS"


def pytest_configure(config):
    # in the controller, before it starts the test processes
    if not hasattr(config, "workerinput") and config.getvalue("dist") == "loadgroup":
        os.environ[_GROUPS_DIR] = tempfile.mkdtemp(prefix="zeroloop-xdist-groups-")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(_GROUPS_DIR):
        shutil.rmtree(os.environ.pop(_GROUPS_DIR), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    groups = {}
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        group = _ONE_WORKER.get(module)
        if group is not None and (module not in _SHARED or _SHARED[module] & set(item.fixturenames)):
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
    if hasattr(config, "workerinput") and os.environ.get(_GROUPS_DIR):
        out = Path(os.environ[_GROUPS_DIR]) / config.workerinput["workerid"]
        out.with_suffix(".tmp").write_text(json.dumps(groups))
        out.with_suffix(".tmp").replace(out.with_suffix(".json"))


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` by the groups above. pytest-xdist 3.8 marks a test's
    group by appending it to the test's nodeid, which pytest 9.2's nodeids no
    longer take (the groups were silently ignored: two Ray clusters at once,
    each module server started in both processes), so the test processes
    write the groups where this scheduler, in the controller, reads them."""
    if config.getvalue("dist") != "loadgroup" or not os.environ.get(_GROUPS_DIR):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        groups: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                written = sorted(Path(os.environ[_GROUPS_DIR]).glob("*.json"))
                if not written:  # no test process has collected yet
                    return nodeid
                self.groups = json.loads(written[0].read_text())
            return self.groups.get(nodeid, nodeid)

    return ModuleGroups(config, log)


@pytest.fixture(autouse=True, scope="session")
def _warm_stages(tmp_path_factory):
    """Stages and ``zeroloop`` commands run as forks of one warm interpreter per
    test process (tests/warm.py: each is still a process of its own, without the
    seconds of imports); ``ZEROLOOP_TEST_COLD=1`` runs them all as new interpreters."""
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
