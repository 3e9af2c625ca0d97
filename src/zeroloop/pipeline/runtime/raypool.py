"""The Ray backend of :mod:`zeroloop.pipeline.runtime.workers`: tasks run as Ray tasks
on a local Ray instance or a cluster (``runtime.backend: ray``).

Each task asks for one CPU (and ``gpus_per_task`` GPUs when the network runs
on CUDA) and runs with one torch thread, like a local worker process. A task
whose worker process or node dies is run again by Ray (``retries``): the
pipeline's tasks are pure functions of their inputs (self-play games are
seeded per shard and game), so a rerun gives the same bytes. Progress ticks,
the node each task starts on and the parts of results tasks stream
(finished self-play shards) go to a small actor on the driver's node that
the driver drains: a lost node is named with the tasks it cost, a task run
again skips the parts its first attempt sent, and a head node that stops
answering ends the stage with one line (:class:`WorkerLost`) instead of
Ray's own 60 s wait and exit, with the streamed parts already written.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import ray
import ray.exceptions as rex

from zeroloop.pipeline.runtime.backend import Backend, Tick, WorkerLost, local_cores

#: Failures of the machinery, not of the task's code: the worker or its node died.
_LOST = (rex.WorkerCrashedError, rex.NodeDiedError, rex.LocalRayletDiedError, rex.ObjectLostError,
         rex.OwnerDiedError, rex.RaySystemError, rex.ActorDiedError)


def _wait_for_head(address: str, timeout_s: float) -> None:
    """A TCP connection to the head's ``host:port`` within ``timeout_s``, else
    ValueError naming the address: Ray's own connect retries for minutes,
    logging warnings that name other addresses, when nothing listens there."""
    deadline = time.monotonic() + timeout_s
    while (why := _reachable(address.removeprefix("ray://"), min(5.0, timeout_s))) is not None:
        if time.monotonic() >= deadline:
            raise ValueError(f"runtime.ray_address={address!r}: cannot reach a Ray cluster there within "
                             f"{timeout_s:.0f}s ({why}); start one with `ray start --head`, or use "
                             "runtime.backend: local") from None
        time.sleep(0.5)


def _reachable(address: str, timeout_s: float = 1.0) -> str | None:
    """None when a TCP connection to ``host:port`` opens within ``timeout_s``, else why not."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except (OSError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _cluster_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's error messages (a worker or a node that
    died, prefixed ``(raylet)``) on stdout, even with ``log_to_driver=False``;
    zeroloop's commands keep stdout for their own output (``zeroloop tune``'s
    JSON summary), so those messages go to stderr."""
    import ray._private.worker as ray_worker

    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "to_stderr", False):
        return

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        original(dict(data, is_err=True), ignore_prefix)

    to_stderr.to_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


def connect(backend: Backend) -> None:
    """Join (or start) the Ray instance ``backend.address`` names, once per process."""
    if ray.is_initialized():
        return
    _cluster_messages_to_stderr()
    named = backend.address or os.environ.get("RAY_ADDRESS", "")
    if named and named != "auto":
        _wait_for_head(named, backend.connect_timeout_s)
    # A driver's shutdown sends its last task events to the head, waiting up to 5 s for an answer
    # (Ray's default): a stage whose head had died waited them out after its error line. Events go every
    # second, so the last batch is small; one second leaves it time where the head answers.
    os.environ.setdefault("RAY_task_events_shutdown_flush_timeout_ms", "1000")
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
    """Units ticked by tasks, and the nodes tasks started on, since the driver
    last asked (a Ray actor)."""

    def __init__(self) -> None:
        self.count = 0
        self.started: list[tuple[int, str]] = []
        self.parts: list[tuple[int, Any]] = []
        self.keys: dict[int, set[int]] = {}  # task -> keys of the parts it sent

    def add(self, n: int) -> None:
        self.count += n

    def start(self, task: int, node: str) -> None:
        self.started.append((task, node))

    def send(self, task: int, key: int, value: Any) -> None:
        self.parts.append((key, value))
        self.keys.setdefault(task, set()).add(key)

    def sent(self, task: int) -> set[int]:
        return self.keys.get(task, set())

    def take(self) -> tuple[int, list[tuple[int, str]], list[tuple[int, Any]]]:
        out = self.count, self.started, self.parts
        self.count, self.started, self.parts = 0, [], []
        return out


class _ActorTick:
    """A picklable :data:`Tick` that adds to the driver's counter actor, and
    streams parts of task ``task``'s result to it
    (:func:`~zeroloop.pipeline.runtime.backend.send_part`)."""

    def __init__(self, counter, task: int) -> None:
        self.counter = counter
        self.task = task

    def __call__(self, n: int) -> None:
        self.counter.add.remote(n)

    def send(self, key: int, value: Any) -> bool:
        """Whether the part reached the actor (waited for: in the actor before
        the task returns); a task on a node losing its raylet cannot reach it."""
        try:
            ray.get(self.counter.send.remote(self.task, key, value), timeout=60)
        except (rex.RayError, rex.GetTimeoutError):
            return False
        return True

    def sent(self) -> set[int]:
        try:
            return ray.get(self.counter.sent.remote(self.task), timeout=60)
        except (rex.RayError, rex.GetTimeoutError):
            return set()


def _run(fn: Callable, task, counter, key: int):
    from zeroloop.pipeline.runtime.process import init_worker_threads

    counter.start.remote(key, ray.get_runtime_context().get_node_id())
    init_worker_threads()
    return fn(task, _ActorTick(counter, key))


#: Ray's driver gives up on a silent head (GCS) after 60 s and ends the process
#: with its own log line; the pool says its line before that.
_HEAD_WAIT_MAX_S = 45.0


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
        self._ran_on: dict[int, list[str]] = {}  # task -> the nodes its attempts started on
        self._done: set[int] = set()
        self._addresses: dict[str, str] = {}  # node id -> address, of every node seen alive
        self._raylets: dict[str, str] = {}  # node id -> its raylet's host:port
        self._retried: list[tuple[int, str]] = []  # (task, node its lost attempt ran on), not yet looked at
        self._said: set[str] = set()  # nodes named lost
        self._said_tasks: set[int] = set()  # tasks named as run again on a live node
        self._parts: list[tuple[int, Any]] = []  # streamed, not yet handed on
        self._ticks = 0  # taken along with parts, not yet handed on
        self._taking = None  # a take() call to the counter not yet answered (asked again, not anew)
        self._nodes = self._alive_nodes()
        self._nodes_checked = time.monotonic()
        self._head = self._head_address(backend)
        self._head_wait_s = min(backend.connect_timeout_s, _HEAD_WAIT_MAX_S)
        self._head_silent_since: float | None = None

    @staticmethod
    def _head_address(backend: Backend) -> str | None:
        """The head's ``host:port`` as configured, else its GCS address as Ray
        reports it (None through Ray Client: no head watch then)."""
        named = backend.address or os.environ.get("RAY_ADDRESS", "")
        if named.startswith("ray://"):
            return None
        if named and named != "auto":
            return named
        try:
            address = ray.get_runtime_context().gcs_address
        except Exception:  # noqa: BLE001 - older contexts lack it: no head watch then
            return None
        return address if isinstance(address, str) and ":" in address else None

    def _alive_nodes(self) -> dict[str, str]:
        """Node id -> address of the cluster's live nodes, as the head sees them."""
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
        except Exception:  # noqa: BLE001 - the cluster's own trouble shows in the tasks
            return {}
        alive = {n["NodeID"]: n.get("NodeManagerAddress", "?") for n in nodes}
        self._addresses.update(alive)
        self._raylets.update({n["NodeID"]: f"{n.get('NodeManagerAddress')}:{n.get('NodeManagerPort')}"
                              for n in nodes if n.get("NodeManagerPort")})
        return alive

    def _watch_head(self) -> bool:
        """Whether the head answers; raise :class:`WorkerLost` once it has been
        silent for ``connect_timeout_s`` (45 s at most)."""
        why = _reachable(self._head) if self._head else None
        if why is None:
            self._head_silent_since = None
            return True
        now = time.monotonic()
        if self._head_silent_since is None:
            self._head_silent_since = now
        elif now - self._head_silent_since >= self._head_wait_s:
            raise WorkerLost(f"the Ray head node at {self._head} stopped answering ({why}) for "
                             f"{self._head_wait_s:.0f}s; the work finished so far is kept: restart the "
                             "cluster and rerun to resume")
        return False

    def _watch_nodes(self) -> None:
        """Say once per node, naming it and the tasks it cost, when a node
        leaves the cluster: Ray runs those tasks again elsewhere (``retries``),
        so the stage goes on. A node is gone when the head says so, or when a
        task that started there started again and the node's raylet no longer
        answers: the head takes seconds to notice (its health checks), and a
        short stage can end before it does."""
        alive = self._alive_nodes()
        gone = [node for node in self._nodes if alive and node not in alive]
        for task, node in self._retried:
            if node in gone or node in self._said:
                continue
            raylet = self._raylets.get(node)
            if raylet is not None and _reachable(raylet) is not None:
                gone.append(node)
            elif task not in self._said_tasks:
                self._said_tasks.add(task)
                where = f"{self._addresses.get(node, '?')} ({node[:12]})"
                print(f"[ray] task {task}: its worker on {where} died; it runs again",
                      file=sys.stderr, flush=True)
        self._retried = []
        for node in gone:
            if node in self._said:
                continue
            self._said.add(node)
            lost = sum(1 for task, nodes in self._ran_on.items()
                       if node in nodes and (task not in self._done or nodes[-1] != node))
            cost = (f"{lost} task{'s' if lost != 1 else ''} that ran there run{'s' if lost == 1 else ''} "
                    "again on the other nodes" if lost else "no task was running there")
            print(f"[ray] lost node {self._addresses.get(node, '?')} ({node[:12]}): {cost}",
                  file=sys.stderr, flush=True)
        if alive:
            self._nodes = alive

    def submit(self, fn: Callable[[Any, Tick], Any], task) -> Future:
        key = len(self._refs)
        ref = self._remote.remote(fn, task, self._counter, key)
        self._refs.append(ref)
        out: Future = Future()

        def settle(done: Future) -> None:
            self._done.add(key)
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
        due = time.monotonic() - self._nodes_checked >= 1.0
        if due:
            self._nodes_checked = time.monotonic()
            if not self._watch_head():
                return 0  # asking the cluster anything now would wait on Ray's own (60 s) timeout
        # also where tasks started, before a lost node's
        ticks = self._take_while_the_head_answers(10.0) + self._ticks
        self._ticks = 0
        if due and self._head_silent_since is None:  # else ray.nodes() waits on Ray's own timeout
            self._watch_nodes()
        return ticks

    def parts(self) -> list[tuple[int, Any]]:
        """The parts tasks streamed since last asked (asked of the actor now:
        a task that is done has sent all of its parts)."""
        if self._head_silent_since is None:  # else it would wait on Ray's own timeout
            stale = self._taking is not None
            self._ticks += self._take(timeout=10.0)
            if stale and self._taking is None:  # that answer was asked for before the caller's
                self._ticks += self._take(timeout=10.0)  # tasks ended: ask again, or theirs stay behind
            for _ in range(5):  # a loaded machine: the counter may take longer to answer, not give up
                if self._taking is None or not self._watch_head():
                    break
                self._ticks += self._take(timeout=10.0)
        out, self._parts = self._parts, []
        return out

    def _take_while_the_head_answers(self, timeout: float) -> int:
        """:meth:`_take`, waiting up to ``timeout`` for the answer a second at a
        time while the head answers: a loaded machine's counter can take
        seconds, a dead head's never answers, and the head's watch (which
        raises after ``connect_timeout_s``) must not wait behind it."""
        deadline = time.monotonic() + timeout
        while True:
            ticks = self._take(timeout=max(min(1.0, deadline - time.monotonic()), 0.01))
            if self._taking is None or time.monotonic() >= deadline or not self._watch_head():
                return ticks

    def _take(self, timeout: float) -> int:
        """The units ticked since last asked; keeps the parts sent and records
        where tasks started."""
        # The actor empties its lists when the call runs, not when its answer is read: a call
        # whose wait timed out (a loaded machine) is waited on again next time, never replaced,
        # or the parts it took would be lost.
        if self._taking is None:
            self._taking = self._counter.take.remote()
        try:
            ticks, started, parts = ray.get(self._taking, timeout=timeout)
        except rex.GetTimeoutError:
            return 0  # the head's watch decides whether the cluster is gone
        except rex.RayActorError:
            self._taking = None
            return 0
        self._taking = None
        self._parts += parts
        for task, node in started:
            before = self._ran_on.setdefault(task, [])
            if before:  # Ray ran it again: the attempt on the last node was lost
                self._retried.append((task, before[-1]))
            before.append(node)
        return ticks

    def _say_placement(self) -> None:
        """One line naming the nodes the tasks started on, when more than one."""
        counts: dict[str, int] = {}
        for nodes in self._ran_on.values():
            for node in nodes:
                counts[node] = counts.get(node, 0) + 1
        if len(counts) > 1:
            where = ", ".join(f"{self._addresses.get(node, '?')} ({node[:12]}) {n}"
                              for node, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
            print(f"[ray] {sum(counts.values())} task runs on {len(counts)} nodes: {where}",
                  file=sys.stderr, flush=True)

    def lost(self, exc: BaseException) -> bool:
        return isinstance(exc, _LOST)

    def terminate(self) -> None:
        for ref in self._refs:
            ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._head_silent_since is None:  # a silent head would keep these waiting
            self._take(timeout=2.0)  # the last task starts
            self._watch_nodes()  # a node lost near the end, before the head noticed
            self._say_placement()
            ray.kill(self._counter)

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
