"""Setting up a process: one torch thread, quiet library logs.

Called by the stages, the workers and the commands, never at import time.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings


def init_worker_threads() -> None:
    """One torch (and BLAS) thread in this process."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def quiet_libraries() -> None:
    """Keep stage output to progress bars and our own lines."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", module="mlflow")
    warnings.filterwarnings("ignore", category=UserWarning, message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=FutureWarning)


@functools.cache  # once per process
def skip_exit_collection() -> None:
    """Skip the garbage collection of everything alive at exit.

    A process that imported torch, MLflow and SQLAlchemy spent 1.5-2 s after
    its last line collecting its objects before it ended (measured: a stage
    1.7-1.9 s, a worker pool's close as long, AMD EPYC Zen 3); every stage and
    every worker pays it. :func:`gc.freeze` as an ``atexit`` hook (they run last
    registered first, so after every hook registered later: MLflow's, the
    worker pool's) moves them out of the collector's sight: the same exit in
    0.3 s. Files are closed by the code that writes them, never by the
    collector, so nothing written is lost."""
    import atexit
    import gc

    atexit.register(gc.freeze)


#: set while :func:`start_up_without_collection` keeps the collector off
_starting = False


def start_up_without_collection() -> None:
    """No garbage collection while this process starts: what a command, a stage
    or a worker calls first, before its imports; :func:`start_work` turns the
    collector back on. Importing torch, Lightning, MLflow and Optuna took
    12.5 and 11.6 CPU-s with the collector on, 11.0 and 10.1 with it off (AMD
    EPYC Zen 3, alternated): it made full passes over a heap growing to about
    540k objects, none of them garbage."""
    import gc

    global _starting
    if gc.isenabled():
        gc.disable()
        _starting = True


def start_work() -> None:
    """The start-up's imports are done: after :func:`start_up_without_collection`,
    freeze what the process holds (:func:`gc.freeze`: out of the collector's
    sight for good; modules, classes and functions do not become garbage) and
    turn the collector back on, so a full collection scans what the work makes,
    not the imports' objects (0.6-0.8 CPU-s a full pass on a Zen 3). Anywhere
    else (a test or a notebook that calls a stage) it does nothing: that heap
    may hold garbage to collect."""
    import gc

    global _starting
    if _starting:
        _starting = False
        gc.freeze()
        gc.enable()


def setup_process() -> None:
    skip_exit_collection()
    init_worker_threads()
    quiet_libraries()


def process_clock() -> dict[str, float]:
    """Seconds since this process started (interpreter start-up and imports
    included) and the CPU seconds it and its children have used: the finished
    ones (joined worker processes) and the running ones (the workers a stage
    keeps for its next matches): what a stage has cost so far."""
    import time

    import psutil

    me = psutil.Process()
    cpu = me.cpu_times()
    used = cpu.user + cpu.system + cpu.children_user + cpu.children_system
    for child in me.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # ended meanwhile: counted in children_* once joined, or lost with it
            continue
        used += times.user + times.system + times.children_user + times.children_system
    return {"stage_wall_s": round(time.time() - me.create_time(), 1), "stage_cpu_s": round(used, 1)}


def machine(device: str, precision: str) -> dict[str, str]:
    """Where a stage's network ran: the CPU model, cores, speed-relevant ISA
    flags, the device, and the precision ``runtime.precision`` resolved to
    (``auto`` can play other games on another CPU). Stages put it in their
    report (``machine``), log it as tags of the generation's MLflow run and say
    it in one line. With Ray, the driver's machine."""
    from zeroloop.engine.nn.machine import describe

    return describe(device, precision)
