"""The worker backend: which pool runs :func:`~zeroloop.pipeline.runtime.workers.run_tasks`'s
tasks (local processes or Ray tasks), the interface both pools provide, and the
progress tick tasks send. A leaf module: the local pools
(:mod:`~zeroloop.pipeline.runtime.workers`) and the Ray pool
(:mod:`~zeroloop.pipeline.runtime.raypool`) both import it, neither imports the other
at module level.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Advances the caller's progress bar by n units; safe to call in a worker.
Tick = Callable[[int], None]


def send_part(tick: Tick, key: int, value: Any) -> bool:
    """Hand a finished piece of a task's result (``key`` unique in the run) to
    the caller now, where the backend streams pieces (Ray: a node or the head
    may die before the task ends, and what reached the caller is kept). False
    where it does not, or the caller could not be reached: the piece then goes
    back with the task's result."""
    send = getattr(tick, "send", None)
    return bool(send(key, value)) if send is not None else False


def parts_sent(tick: Tick) -> set[int]:
    """Keys of the pieces an earlier attempt of this task already sent (Ray
    runs a task again when its node died): the attempt can skip them."""
    sent = getattr(tick, "sent", None)
    return set(sent()) if sent is not None else set()


class TaskPool(Protocol):
    workers: int

    def submit(self, fn: Callable[[T, Tick], R], task: T) -> Future: ...

    def drain(self, timeout: float = 0.2) -> int: ...

    def parts(self) -> list[tuple[int, Any]]: ...

    def lost(self, exc: BaseException) -> bool: ...

    def terminate(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Backend:
    """Where :func:`run_tasks` runs its tasks (params.yaml ``runtime``).

    kind: ``local`` (processes on this machine) or ``ray`` (Ray tasks).
    address: Ray only. ``""``: join the cluster named by ``RAY_ADDRESS``, else
        start a private Ray instance on this machine for this process;
        ``auto``: the cluster this machine is a node of (``ray start``);
        ``host:port``: a head node's GCS address; ``ray://host:port``: Ray Client.
    gpus_per_task: Ray only: GPUs each task asks for when the network runs on
        CUDA (0.5: two tasks share a GPU).
    retries: Ray only: how often a task whose worker or node died is run
        again (its shards are rebuilt from their seeds, so nothing changes).
    connect_timeout_s: Ray only: seconds to wait for the head node at a
        ``host:port`` address before giving up with one line.
    """

    kind: Literal["local", "ray"] = "local"
    address: str = ""
    gpus_per_task: float = 0.0
    retries: int = 3
    connect_timeout_s: float = 20.0

    @property
    def shares_files(self) -> bool:
        """Whether tasks can write files this process then reads (a Ray
        cluster's nodes have their own disks: results come back instead)."""
        return self.kind == "local"


_backend = Backend()


def use_backend(backend: Backend) -> None:
    """Send this process's :func:`run_tasks` calls to ``backend``."""
    global _backend
    _backend = backend


def current_backend() -> Backend:
    return _backend


class WorkerLost(RuntimeError):
    """A worker process died mid-task (killed, or out of memory), or a Ray
    task failed more often than its retries."""


def local_cores() -> int:
    """The cores this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
