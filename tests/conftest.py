import json
import os
import shutil
import sys
import tempfile
import time
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
#: a cache folder every test process of this run shares: what one made, the others read, and
#: nothing comes from an earlier run's files (test_isa_emulation's patched ONNX Runtime)
_SHARED_CACHE = "ZEROLOOP_TEST_SHARED_CACHE"
#: the machine's CPU seconds when the run began (see pytest_terminal_summary)
_START_CPU = pytest.StashKey[tuple | None]()
#: the run's warm server (tests/warm.py), started in the controller; its folder, for the test processes
_WARM = pytest.StashKey[object]()
_WARM_DIR = "ZEROLOOP_TEST_WARM"


def _machine_cpu_s() -> tuple[float, float] | None:
    """The whole machine's busy and total CPU seconds since boot (/proc/stat's
    first line; None where there is none): the suite's CPU counts its servers,
    Ray's daemons and killed processes too."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, sum(ticks) / hz


def _cpu_words() -> str:
    """The CPU as /proc/cpuinfo names it: model name, family and model (a
    virtual machine's name is often generic), and the flags that decide speed.
    Not ``zeroloop.engine.nn.machine``'s: that module imports torch, which
    the controller process otherwise never does."""
    info = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not line.strip():
                    break
                info.setdefault(key.strip(), value.strip())
    except OSError:
        return "unknown CPU"
    have = set(info.get("flags", "").split())
    flags = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8") if f in have]
    name = f"{info.get('model name', 'unknown CPU')} (family {info.get('cpu family', '?')} model " \
           f"{info.get('model', '?')})"
    return f"{name}, {len(os.sched_getaffinity(0))} cores, {' '.join(flags) or 'no AVX2'}"


def pytest_configure(config):
    # in the controller, before it starts the test processes
    if hasattr(config, "workerinput"):
        return
    config.stash[_START_CPU] = _machine_cpu_s()
    if config.getvalue("dist") == "loadgroup":
        os.environ[_GROUPS_DIR] = tempfile.mkdtemp(prefix="zeroloop-xdist-groups-")
    os.environ[_SHARED_CACHE] = tempfile.mkdtemp(prefix="zeroloop-test-cache-")
    if not (os.environ.get("ZEROLOOP_TEST_COLD") or config.option.collectonly or config.option.help):
        from warm import WarmServer

        # every zeroloop process sets this before torch starts (runtime.process.init_worker_threads), and
        # an in-process test sets it in its process: set once first, the server, the test processes and
        # their requests agree on it
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ[_WARM_DIR] = tempfile.mkdtemp(prefix="zeroloop-warm-")
        config.stash[_WARM] = server = WarmServer(Path(os.environ[_WARM_DIR]))
        if os.environ.get("ZEROLOOP_TEST_TIMELINE"):  # its forks are the stages (benchmarks/suite_cpu.py)
            with open(os.environ["ZEROLOOP_TEST_TIMELINE"], "a", encoding="utf-8") as f:
                f.write(f"# warm server {server.proc.pid}\n")


def pytest_terminal_summary(terminalreporter, config):
    """The machine the suite ran on, and its CPU while it ran: the suite's
    budget is for one kind of CPU, and its durations mean little without it."""
    if hasattr(config, "workerinput"):
        return
    line = f"tests ran on {_cpu_words()}"
    start, end = config.stash.get(_START_CPU, None), _machine_cpu_s()
    if start and end and end[1] > start[1]:
        busy = end[0] - start[0]
        line += f"; the machine's CPU meanwhile: {busy / 60:.1f} min, {busy / (end[1] - start[1]):.0%} busy"
    terminalreporter.write_line(line)


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    server = config.stash.get(_WARM, None)
    if server is not None:
        server.close()
        shutil.rmtree(os.environ.pop(_WARM_DIR), ignore_errors=True)
    for name in (_GROUPS_DIR, _SHARED_CACHE):
        if os.environ.get(name):
            shutil.rmtree(os.environ.pop(name), ignore_errors=True)


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
def _warm_stages():
    """Stages and ``zeroloop`` commands run as forks of one warm interpreter
    (tests/warm.py: each is still a process of its own, without the seconds of
    imports), one for the run: pytest's main process starts it before the test
    processes, which share it. ``ZEROLOOP_TEST_COLD=1`` runs them all as new
    interpreters. The process pools of the stages and of the tests here spawn
    their workers through the server too (forks of it, each a process of its own)."""
    import multiprocessing.spawn

    import services

    if os.environ.get("ZEROLOOP_TEST_COLD") or not os.environ.get(_WARM_DIR):
        yield None
        return
    from warm import WarmServer

    server = WarmServer.attach(Path(os.environ[_WARM_DIR]))
    cold = (list(services.PYTHON), list(services.STAGES), list(services.ZEROLOOP))
    services.PYTHON[:] = [server.python]
    services.STAGES[:] = [server.python, *services.STAGES[1:]]
    services.ZEROLOOP[:] = [server.zeroloop]
    services.WARM_BIN[:] = [str(server.bin)]
    spawn_with = multiprocessing.spawn.get_executable()
    multiprocessing.spawn.set_executable(server.python)
    yield server
    multiprocessing.spawn.set_executable(spawn_with)
    services.PYTHON[:], services.STAGES[:], services.ZEROLOOP[:] = cold
    services.WARM_BIN.clear()


#: modules whose subject is the worker processes themselves: their pools start and end as a stage's do
_OWN_WORKERS = {"test_workers"}


#: variables a game-playing worker never reads: the tracking store's and where its artifacts go
#: (workers log nothing), the seed Lightning's seed_everything leaves behind, pytest's per-test one
_NOT_READ_BY_WORKERS = ("MLFLOW_", "DVC_ROOT", "PL_GLOBAL_SEED", "PYTEST_CURRENT_TEST")


def _started_in() -> tuple[dict, str]:
    """What a worker process reads once, when it starts."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_NOT_READ_BY_WORKERS)}, os.getcwd()


@pytest.fixture(autouse=True, scope="session")
def _shared_workers():
    """The in-process tests' process pools share one kept set of workers, as a
    tuning study's trials do (``keep_workers``; results never depend on which
    worker ran a task): a spawned worker costs seconds of imports, and these
    tests started about 30. The set is started afresh when a test changed the
    environment or the working directory, which a worker reads only when it
    starts. ``ZEROLOOP_TEST_COLD=1`` gives every call its own pool again."""
    from zeroloop.pipeline.runtime import workers

    if os.environ.get("ZEROLOOP_TEST_COLD"):
        yield
        return
    make_pool, where = workers.make_pool, {}  # the kept pool -> where it started

    def fresh_where_it_matters(n, tasks):
        if workers._kept["pool"] is not None and where.get(workers._kept["pool"]) != _started_in():
            workers._drop_kept()
        pool = make_pool(n, tasks)
        if workers._kept["pool"] is not None and workers._kept["pool"] not in where:
            where.clear()
            where[workers._kept["pool"]] = _started_in()
        return pool

    workers.make_pool = fresh_where_it_matters
    yield
    workers.make_pool = make_pool
    workers._kept["keeping"] = False
    workers._drop_kept()


@pytest.fixture(autouse=True)
def _kept_workers(request, _shared_workers, _warm_stages):
    """Each test of :data:`_OWN_WORKERS` starts without the shared set, as a stage does,
    and spawns its workers as new interpreters (below)."""
    import multiprocessing.spawn

    from zeroloop.pipeline.runtime import workers

    own = os.environ.get("ZEROLOOP_TEST_COLD") or request.module.__name__.rpartition(".")[2] in _OWN_WORKERS
    if own:
        workers._drop_kept()
    workers._kept["keeping"] = not own
    # and spawns them as new interpreters: a fork of the warm server is no child of the process
    # that spawned it, whose clock counts its children's CPU
    spawn_with = multiprocessing.spawn.get_executable()
    if own:
        multiprocessing.spawn.set_executable(sys.executable)
    yield
    multiprocessing.spawn.set_executable(spawn_with)


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


#: ``ZEROLOOP_TEST_TIMELINE=FILE``: each test process appends a line per test to FILE (its worker and
#: pid, start and end as epoch seconds, the test): which tests ran beside which, the tail, and what
#: benchmarks/suite_cpu.py charges each test with
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("ZEROLOOP_TEST_TIMELINE")
    start = time.time()
    yield
    _freeze_large_imports()
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')} {os.getpid()} {start:.2f} "
                    f"{time.time():.2f} {item.nodeid}\n")


#: the imports that make a test process's heap large (about 540k objects with the first four)
_LARGE_IMPORTS = ("torch", "lightning.pytorch", "mlflow", "optuna", "ray")
_frozen_after: set[str] = set()


def _freeze_large_imports() -> None:
    """After the test that first brought one of :data:`_LARGE_IMPORTS` into
    this test process: collect, then freeze what is alive (:func:`gc.freeze`),
    as the product's processes do once their imports are done
    (``runtime.process.start_work``). Without it each of the collector's full
    passes scanned every imported object: 0.65 CPU-s on a Zen 3, 27-28 such
    passes in each test process of a run (35 CPU-s of the suite's). At most
    five collections a process; the frozen objects are the imports and the
    module fixtures alive then, and ``del`` still frees them."""
    new = [name for name in _LARGE_IMPORTS if name in sys.modules and name not in _frozen_after]
    if new:
        import gc

        _frozen_after.update(new)
        gc.collect()
        gc.freeze()
