"""Where parallel work runs: a small pool interface with an in-process, a
multi-process and a Ray implementation, and :func:`run_tasks`, which maps a
function over tasks with a progress bar.

Each worker process uses one torch thread (two threads with the other core
busy ran 10-20x slower here), so parallelism comes from processes, one per
core. The backend (``runtime.backend``: local processes or Ray tasks) is chosen
once per process with :func:`use_backend`; the code that calls
:func:`run_tasks` does not change with it. A backend provides ``submit``
returning ``concurrent.futures.Future`` objects, ``drain`` for progress ticks
sent from inside tasks, and says whether its tasks share this machine's files.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm

from zeroloop.pipeline.runtime.backend import R, T, TaskPool, Tick, WorkerLost, current_backend, local_cores
from zeroloop.pipeline.runtime.process import (
    init_worker_threads,
    skip_exit_collection,
    start_up_without_collection,
    start_work,
)

_progress_queue = None


def _die_with_parent(parent: int) -> None:
    """Have the kernel kill this worker when its parent dies (Linux), so a
    killed stage leaves no orphans that go on writing its files; elsewhere a
    watchdog thread notices the parent is gone."""
    import ctypes
    import threading
    import time

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(0.5)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _init_process(q, parent: int) -> None:
    global _progress_queue
    start_up_without_collection()  # until the first task's imports are done (_run_in_worker)
    _progress_queue = q
    _die_with_parent(parent)
    # Ctrl-C reaches the whole process group; the parent decides (it terminates the pool),
    # so a worker does not die half-way through writing its result
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    skip_exit_collection()  # the pool's close waits for its workers to end
    init_worker_threads()


def _queue_tick(n: int) -> None:
    if _progress_queue is not None:
        _progress_queue.put(n)


def _run_in_worker(fn: Callable, task):
    start_work()
    return fn(task, _queue_tick)


class InlinePool:
    """Runs tasks one after another in this process (``submit`` runs at once)."""

    workers = 1

    def submit(self, fn: Callable[[T, Tick], R], task: T) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(task, lambda n: None))
        except Exception as exc:  # noqa: BLE001 - delivered through the future like a process pool
            fut.set_exception(exc)
        return fut

    def drain(self, timeout: float = 0.2) -> int:
        return 0

    def parts(self) -> list:
        return []  # tasks here share this machine's files: nothing is streamed

    def lost(self, exc: BaseException) -> bool:
        return False

    def terminate(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> InlinePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ProcessPool:
    """``workers`` spawned processes (spawn: safe with torch and numba)."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers={workers} must be >= 1")
        self.workers = workers
        ctx = mp.get_context("spawn")
        self.progress = ctx.Queue()
        self._executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_init_process,
            initargs=(self.progress, os.getpid()))

    def submit(self, fn: Callable[[T, Tick], R], task: T) -> Future:
        return self._executor.submit(_run_in_worker, fn, task)

    def drain(self, timeout: float = 0.2) -> int:
        n = 0
        try:
            n += self.progress.get(timeout=timeout)
            while True:
                n += self.progress.get_nowait()
        except queue_mod.Empty:
            return n

    def parts(self) -> list:
        return []  # tasks here share this machine's files: nothing is streamed

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, BrokenProcessPool)

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def terminate(self) -> None:
        """Stop now (Ctrl-C): kill the workers instead of waiting for their tasks."""
        for proc in list((getattr(self._executor, "_processes", None) or {}).values()):
            proc.terminate()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_workers() -> int:
    """One worker per core: this machine's, or the Ray cluster's CPUs."""
    if current_backend().kind == "ray":
        from zeroloop.pipeline.runtime.raypool import cluster_cpus

        return cluster_cpus(current_backend())
    return local_cores()


class _KeptPool:
    """The process pool :func:`keep_workers` holds, lent to one :func:`run_tasks`
    call: closing it leaves the workers running for the next call; a pool that
    lost a worker or was stopped is dropped, so the next call starts afresh."""

    def __init__(self, pool: ProcessPool) -> None:
        self.pool = pool
        self.workers = pool.workers
        pool.drain(0.0)  # a tick the last call's final task sent after its result: not this call's

    def submit(self, fn: Callable[[T, Tick], R], task: T) -> Future:
        return self.pool.submit(fn, task)

    def drain(self, timeout: float = 0.2) -> int:
        return self.pool.drain(timeout)

    def parts(self) -> list:
        return []

    def lost(self, exc: BaseException) -> bool:
        if self.pool.lost(exc):
            _drop_kept()
            return True
        return False

    def terminate(self) -> None:
        _drop_kept(terminate=True)

    def close(self) -> None:
        pass

    def __enter__(self) -> _KeptPool:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None and _kept["pool"] is self.pool:  # a task failed: its worker may be broken
            _drop_kept(terminate=True)


#: ``keeping``: inside :func:`keep_workers`; ``pool``: the process pool kept there, once one was needed.
_kept: dict[str, Any] = {"keeping": False, "pool": None}


def _drop_kept(terminate: bool = False) -> None:
    pool, _kept["pool"] = _kept["pool"], None
    if pool is not None:
        pool.terminate() if terminate else pool.close()


@contextmanager
def keep_workers() -> Iterator[None]:
    """Inside, :func:`run_tasks` calls on the local backend share one set of
    worker processes instead of starting their own: a tuning study's rounds
    and trials, a stage's several matches. A worker process costs seconds of
    imports (torch, numba's kernels) before its first game. Nested uses share
    the outer one; results never depend on which worker ran a task."""
    if _kept["keeping"]:
        yield
        return
    _kept["keeping"] = True
    try:
        yield
    finally:
        _kept["keeping"] = False
        _drop_kept()


def make_pool(workers: int | None, tasks: int) -> TaskPool:
    """A pool of ``workers`` (0/None: one per core) on the current backend; on
    the local one, the inline pool when only one worker would be busy, and
    inside :func:`keep_workers` the kept processes (started on first need,
    restarted larger when a call wants more)."""
    n = min(workers or default_workers(), max(tasks, 1))
    if current_backend().kind == "ray":
        from zeroloop.pipeline.runtime.raypool import RayPool

        return RayPool(n, current_backend())
    if n <= 1:
        return InlinePool()
    if not _kept["keeping"]:
        return ProcessPool(n)
    if _kept["pool"] is None or _kept["pool"].workers < n:
        _drop_kept()
        _kept["pool"] = ProcessPool(n)
    return _KeptPool(_kept["pool"])


def run_tasks(fn: Callable[[T, Tick], R], tasks: Sequence[T], *, workers: int | None = None,
              total: int | None = None, desc: str = "", unit: str = "it", progress: bool = True,
              on_result: Callable[[int, R], None] | None = None,
              on_part: Callable[[int, Any], None] | None = None) -> list[R]:
    """``[fn(task, tick) for task in tasks]`` over worker processes (or Ray tasks).

    ``fn`` must be a module-level function and tasks picklable. ``tick(n)``
    advances a progress bar of ``total`` units (default: one per task, ticked
    here when a task finishes). ``on_result(i, result)`` is called here as
    each task finishes, in the order they finish. ``on_part(key, value)`` is
    called here for each piece a task streams with
    :func:`~zeroloop.pipeline.runtime.backend.send_part` (Ray only), before the
    result of the task that sent it. Results come back in task order; the
    first failure is raised after the other running tasks are cancelled.
    """
    bar = tqdm(total=total if total is not None else len(tasks), desc=desc, unit=unit,
               disable=not progress, dynamic_ncols=True)
    results: list = [None] * len(tasks)
    with make_pool(workers, len(tasks)) as pool:
        if isinstance(pool, InlinePool):  # run lazily so the bar moves as work is done
            try:
                for i, task in enumerate(tasks):
                    results[i] = fn(task, bar.update if total is not None else lambda n: None)
                    if on_result is not None:
                        on_result(i, results[i])
                    if total is None:
                        bar.update(1)
            finally:
                bar.close()
            return results
        futures = {pool.submit(fn, t): i for i, t in enumerate(tasks)}
        pending = set(futures)
        def take_parts() -> None:
            for key, value in pool.parts():
                if on_part is None:
                    raise RuntimeError(f"a task sent a part ({key}) but run_tasks has no on_part")
                on_part(key, value)

        try:
            while pending:
                ticks = pool.drain()
                if total is not None and ticks:
                    bar.update(ticks)
                done = [f for f in pending if f.done()]  # before the parts: theirs are all in
                take_parts()
                for fut in done:
                    pending.discard(fut)
                    i = futures[fut]
                    try:
                        results[i] = fut.result()
                    except Exception as exc:
                        if pool.lost(exc):
                            raise WorkerLost(f"a worker process died (killed, or out of memory?): "
                                             f"{_first_line(exc)}; finished work is kept: rerun to resume"
                                             ) from None
                        raise
                    if on_result is not None:
                        on_result(i, results[i])
                    if total is None:
                        bar.update(1)
            ticks = pool.drain(0.0)  # ticks sent just before the last task ended
            if total is not None:
                bar.update(ticks)
            take_parts()
        except KeyboardInterrupt:
            pool.terminate()
            raise
        finally:
            for fut in pending:
                fut.cancel()
            bar.close()
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
