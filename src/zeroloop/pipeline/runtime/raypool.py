"""The Ray backend of :mod:`zeroloop.pipeline.runtime.workers`: tasks run as Ray tasks
on a local Ray instance or a cluster (``runtime.backend: ray``).

Each task asks for one CPU (and ``gpus_per_task`` GPUs when the network runs
on CUDA) and runs with one torch thread, like a local worker process. A task
whose worker process or node dies is run again by Ray (``retries``): the
pipeline's tasks are pure functions of their inputs (self-play games are
seeded per shard and game), so a rerun gives the same bytes. Progress ticks
sent from inside tasks go to a small counter actor that the driver drains.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ray
import ray.exceptions as rex

from zeroloop.pipeline.runtime.backend import Backend, Tick, local_cores

#: Failures of the machinery, not of the task's code: the worker or its node died.
_LOST = (rex.WorkerCrashedError, rex.NodeDiedError, rex.LocalRayletDiedError, rex.ObjectLostError,
         rex.OwnerDiedError, rex.RaySystemError, rex.ActorDiedError)


def _wait_for_head(address: str, timeout_s: float) -> None:
    """A TCP connection to the head's ``host:port`` within ``timeout_s``, else
    ValueError naming the address: Ray's own connect retries for minutes,
    logging warnings that name other addresses, when nothing listens there."""
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, timeout_s)):
                return
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                why = getattr(exc, "strerror", None) or exc
                raise ValueError(f"runtime.ray_address={address!r}: cannot reach a Ray cluster there within "
                                 f"{timeout_s:.0f}s ({why}); start one with `ray start --head`, or use "
                                 "runtime.backend: local") from None
            time.sleep(0.5)


def connect(backend: Backend) -> None:
    """Join (or start) the Ray instance ``backend.address`` names, once per process."""
    if ray.is_initialized():
        return
    named = backend.address or os.environ.get("RAY_ADDRESS", "")
    if named and named != "auto":
        _wait_for_head(named, backend.connect_timeout_s)
    address = backend.address or None
    kwargs: dict[str, Any] = {}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        kwargs["num_cpus"] = local_cores()  # a private instance on this machine
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False, configure_logging=True, **kwargs)
    except ConnectionError as exc:
        raise ValueError(f"runtime.ray_address={backend.address!r}: cannot reach a Ray cluster there "
                         f"({str(exc).splitlines()[0] if str(exc) else 'no answer'}); start one with "
                         "`ray start --head` or use runtime.backend: local") from None


def cluster_cpus(backend: Backend) -> int:
    """CPUs in the Ray cluster: the worker count when ``runtime.workers`` is 0."""
    connect(backend)
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


class ProgressCounter:
    """Units ticked by tasks since the driver last asked (a Ray actor)."""

    def __init__(self) -> None:
        self.count = 0

    def add(self, n: int) -> None:
        self.count += n

    def take(self) -> int:
        n, self.count = self.count, 0
        return n


class _ActorTick:
    """A picklable :data:`Tick` that adds to the driver's counter actor."""

    def __init__(self, counter) -> None:
        self.counter = counter

    def __call__(self, n: int) -> None:
        self.counter.add.remote(n)


def _run(fn: Callable, task, counter):
    from zeroloop.pipeline.runtime.process import init_worker_threads

    init_worker_threads()
    return fn(task, _ActorTick(counter))


class RayPool:
    """``workers`` concurrent Ray tasks at most (Ray queues the rest)."""

    def __init__(self, workers: int, backend: Backend) -> None:
        connect(backend)
        self.workers = workers
        # the counter lives on the driver's node: a worker node that dies must not take it along
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        self._counter = ray.remote(num_cpus=0)(ProgressCounter).options(scheduling_strategy=here).remote()
        self._remote = ray.remote(_run).options(num_cpus=1, num_gpus=backend.gpus_per_task,
                                                 max_retries=backend.retries, retry_exceptions=False)
        self._refs: list = []
        self._nodes = self._alive_nodes()
        self._nodes_checked = time.monotonic()

    @staticmethod
    def _alive_nodes() -> dict[str, str]:
        """Node id -> address of the cluster's live nodes."""
        try:
            return {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in ray.nodes() if n.get("Alive")}
        except Exception:  # noqa: BLE001 - the cluster's own trouble shows in the tasks
            return {}

    def _watch_nodes(self) -> None:
        """Say once, naming it, when a node leaves the cluster: Ray runs its
        tasks again elsewhere (``retries``), so the stage goes on."""
        if time.monotonic() - self._nodes_checked < 1.0:
            return
        self._nodes_checked = time.monotonic()
        alive = self._alive_nodes()
        if not alive:
            return
        for node, address in self._nodes.items():
            if node not in alive:
                print(f"[ray] lost node {address} ({node[:12]}): its tasks run again on the other nodes",
                      file=sys.stderr, flush=True)
        self._nodes = alive

    def submit(self, fn: Callable[[Any, Tick], Any], task) -> Future:
        ref = self._remote.remote(fn, task, self._counter)
        self._refs.append(ref)
        out: Future = Future()

        def settle(done: Future) -> None:
            exc = done.exception()
            if exc is None:
                out.set_result(done.result())
            elif isinstance(exc, rex.RayTaskError) and exc.cause is not None:
                out.set_exception(exc.cause)  # the task's own error (a ValueError stays one)
            else:
                out.set_exception(exc)

        ref.future().add_done_callback(settle)
        return out

    def drain(self, timeout: float = 0.2) -> int:
        time.sleep(timeout)
        self._watch_nodes()
        return ray.get(self._counter.take.remote())

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, _LOST)

    def terminate(self) -> None:
        for ref in self._refs:
            ray.cancel(ref, force=True)

    def close(self) -> None:
        ray.kill(self._counter)

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
