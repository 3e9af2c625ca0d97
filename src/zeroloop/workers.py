"""Where parallel work runs: a small pool interface with an in-process and a
multi-process implementation. Each worker process uses one torch thread
(two threads with the other core busy ran 10-20x slower here), so parallelism
comes from processes, one per core. A cluster backend (Ray, say) only has to
provide ``map``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class TaskPool(Protocol):
    workers: int

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """Run ``fn`` over ``tasks``; results in task order."""
        ...

    def close(self) -> None: ...


def init_worker_threads() -> None:
    """One torch (and BLAS) thread in this process."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


class InlinePool:
    """Runs tasks one after another in this process."""

    workers = 1

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return [fn(t) for t in tasks]

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
        self._executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=mp.get_context("spawn"),
            initializer=init_worker_threads)

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return list(self._executor.map(fn, tasks))

    def submit_all(self, fn: Callable[[T], R], tasks: Iterable[T]):
        return [self._executor.submit(fn, t) for t in tasks]

    def close(self) -> None:
        self._executor.shutdown(cancel_futures=True)

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_workers() -> int:
    """One worker per core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
