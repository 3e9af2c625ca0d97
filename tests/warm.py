"""A warm interpreter for the suite's stage processes.

A stage process spends most of its CPU importing torch, Lightning and MLflow
(about 3-10 CPU-s each on a Zen 3; the suite starts a few hundred of them).
Here one server per test process imports all of that once, then forks a fresh
child for each ``python -m zeroloop.pipeline.stages ...`` it is asked to run
(and each ``zeroloop`` command, and each ``python benchmarks/NAME.py``).
The child is still a process of its own: its own globals (MLflow's tracking
URI, torch's random state, logging), working directory, environment, stdin,
stdout, stderr, exit status and signals, so the stage is run as DVC runs it.

The client is ``bin/python``, a shim put first on PATH (DVC's stage commands
find it there) and named by ``services.STAGES``. It sends its argv, working
directory, environment and its three standard file descriptors over a Unix
socket, forwards SIGTERM and SIGHUP to the stage and SIGINT to the stage's
process group (as Ctrl-C reaches a terminal's), and exits as the stage did.
Anything else it runs the real interpreter for (``execv``), as it does when
the server is gone or gave up, or the request's environment differs from the
server's in a variable read at import time (thread counts, ISA caps, paths).
A request that comes while the server still imports waits for it: a new
interpreter beside it would import the same on the same two cores.

The server's forks are process-group leaders: when a client dies (SIGKILL,
a test's timeout) the server's watcher kills the stage's whole group.

A process pool's spawned worker (multiprocessing's ``python -c "from
multiprocessing.spawn import spawn_main; ..."``) is a fork too: the forks and
the test processes spawn through the shim, which sends every descriptor it
inherited with its number; the fork puts each back at that number and runs
the same program. It answers ``os.getppid()`` with the spawning process's pid
and is killed when that process ends, as a spawned child would see and be.
"""

from __future__ import annotations

import array
import atexit
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

#: Environment variables a library reads when it is imported or first used:
#: a request whose value differs from the server's runs as a real process
IMPORT_TIME = ("OMP_", "MKL_", "KMP_", "NUMBA_", "ONEDNN_", "DNNL_", "ATEN_", "TORCH_", "CUDA_",
               "PYTHON", "LD_", "VIRTUAL_ENV")
#: the modules the server runs: the stages' (``python -m``) and the console script's
MODULES = ("zeroloop.pipeline.stages", "zeroloop")
#: and the scripts here (``python benchmarks/NAME.py``: the benchmarks' smoke runs)
SCRIPTS = str(Path(__file__).resolve().parents[1] / "benchmarks")
#: what a stage process imports (the slow part), imported once by the server
#: (MLflow's SQL stores import SQLAlchemy and Alembic on a stage's first run: 0.7 CPU-s a fork on an Intel)
PRELOAD = ("torch", "numpy", "numba", "yaml", "lightning.pytorch", "mlflow", "mlflow.pytorch", "optuna",
           "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.model_registry.sqlalchemy_store",
           "onnx", "onnxruntime",
           "zeroloop.apps.cli", "zeroloop.pipeline.stages.common",
           "zeroloop.pipeline.stages.check", "zeroloop.pipeline.stages.init",
           "zeroloop.pipeline.stages.positions", "zeroloop.pipeline.stages.selfplay",
           "zeroloop.pipeline.stages.train", "zeroloop.pipeline.stages.gate",
           "zeroloop.pipeline.stages.evaluate", "zeroloop.pipeline.stages.report",
           "zeroloop.pipeline.training.module")

SHIM = '''#!{python} -S
"""The warm server's client (tests/warm.py): runs {what} in a fork of the
server at {sock}, or execs {real}."""
import array, json, os, signal, socket, sys, time

REAL, SOCK, MODULE, SCRIPTS = {real!r}, {sock!r}, {module!r}, {scripts!r}
SPAWN_MAIN = "from multiprocessing.spawn import spawn_main; spawn_main("


def real():
    os.execv(REAL, [REAL, *sys.argv[1:]])


def serving():
    """Whether the server serves, once it has imported: a stage asked for while
    it imports waits for it rather than importing the same again beside it."""
    deadline = time.monotonic() + 180
    while not os.path.exists(SOCK):
        try:
            with open(SOCK + ".pid") as f:
                pid = int(f.read())
            with open(f"/proc/{{pid}}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):  # it gave up, not yet reaped
                    return False
        except (OSError, ValueError, IndexError):  # no server, or it is gone
            return False
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def spawned(args):
    """multiprocessing's spawned child (``[-B] -c PROGRAM --multiprocessing-fork``): its
    program, else None."""
    prog = args[-2] if len(args) >= 3 else ""
    if args[-1:] == ["--multiprocessing-fork"] and args[-3] == "-c" and all(a == "-B" for a in args[:-3]) \\
            and prog.startswith(SPAWN_MAIN) and prog.endswith(")") and "\\n" not in prog:
        return prog
    return None


def main():
    args = sys.argv[1:] if MODULE is None else ["-m", MODULE, *sys.argv[1:]]
    spawn = spawned(args) if MODULE is None else None
    script = MODULE is None and bool(args) and args[0].endswith(".py") and os.path.isfile(args[0]) \
        and os.path.dirname(os.path.abspath(args[0])) == SCRIPTS
    if not spawn and not script and (len(args) < 2 or args[0] != "-m" or args[1] not in {modules!r}) \\
            or not serving():
        real()
    # a spawned child's descriptors keep their numbers (its program and pickled pipes name them)
    fds = [0, 1, 2]
    if spawn:
        fds = []
        for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
            try:
                os.fstat(fd)
                fds.append(fd)
            except OSError:  # the listing's own, closed by now
                pass
    conn = socket.socket(socket.AF_UNIX)
    try:
        conn.connect(SOCK)
        # sys.path[0]: the working directory under ``python -m``, the script's directory for a command
        # or a script, '' under ``-c``
        if spawn:
            argv, path0 = ["-c", "--multiprocessing-fork"], ""
        elif script:
            argv, path0 = [os.path.abspath(args[0]), *args[1:]], SCRIPTS
        else:
            argv, path0 = args[1:], (os.getcwd() if MODULE is None else os.path.dirname(REAL))
        req = json.dumps({{"argv": argv, "cwd": os.getcwd(), "path0": path0, "script": script, "spawn": spawn,
                          "fds": fds, "ppid": os.getppid(), "env": dict(os.environ)}}).encode()
        conn.sendmsg([len(req).to_bytes(8, "big") + req],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        reply = conn.makefile("rb")
        first = reply.readline().split()
    except OSError:
        real()
    if not first or first[0] != b"pid":
        conn.close()
        real()
    pid = int(first[1])

    def forward(sig, _frame):
        try:  # Ctrl-C reaches a whole process group: the stage's workers too
            (os.killpg if sig == signal.SIGINT else os.kill)(pid, sig)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        try:
            line = reply.readline()
            break
        except InterruptedError:
            continue
    status = int(line) if line.strip() else -1
    if status < 0:
        os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


main()
'''


#: descriptors a spawned child may bring (its pipes, the resource tracker's, 0-2); more: a new interpreter
MAX_FDS = 64


def _import_time_env(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    head, ancdata, _flags, _addr = conn.recvmsg(1 << 16, socket.CMSG_LEN(MAX_FDS * fds.itemsize))
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    size = int.from_bytes(head[:8], "big")
    body = bytearray(head[8:])
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise ConnectionError("the client hung up mid-request")
        body += more
    return json.loads(body), list(fds)


def _run_stage(req: dict, fds: list[int]) -> None:
    """In the fork: become the stage process the client asked for; never returns."""
    code = 1
    try:
        os.setpgid(0, 0)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        spawn = req.get("spawn")
        targets = req["fds"] if spawn else range(3)
        # out of the way first: a descriptor received may sit at another's number
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1024) for fd in fds]
        for fd in fds:
            os.close(fd)
        for target, fd in zip(targets, high):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as a new interpreter decides at start
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = list(req["argv"])
        sys.path[0] = req["path0"]
        import runpy

        code = 0
        try:
            if spawn:
                # a pool's worker: its parent is the process that spawned it (the product's workers
                # check that theirs is alive), not the server's watcher
                parent = req["ppid"]
                os.getppid = lambda: parent if _alive(parent) else 1
                exec(compile(spawn, "<string>", "exec"), {"__name__": "__main__"})
            elif req.get("script"):
                runpy.run_path(req["argv"][0], run_name="__main__")
            else:
                runpy.run_module(req["argv"][0], run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _watch(conn: socket.socket, listener: socket.socket, req: dict, fds: list[int]) -> None:
    """In the fork: fork the stage, tell the client its pid and, later, its
    wait status; kill the stage's group if the client goes away. Never returns."""
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _run_stage(req, fds)
        for fd in fds:
            os.close(fd)
        conn.sendall(f"pid {pid}\n".encode())
        try:
            waits, poll = [os.pidfd_open(pid)], None  # readable when the stage ends (Linux 5.3)
        except (AttributeError, OSError):
            waits, poll = [], 0.05
        spawner = None  # a spawned worker dies with the process that spawned it (PR_SET_PDEATHSIG)
        if req.get("spawn"):
            try:
                spawner = os.pidfd_open(req["ppid"])
                waits.append(spawner)
            except (AttributeError, OSError):
                poll = 0.05
        while True:
            ready, _, _ = select.select([*waits, conn], [], [], poll)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                conn.sendall(f"{status}\n".encode())
                break
            if spawner is not None:
                orphaned = spawner in ready
            else:
                orphaned = bool(req.get("spawn")) and not _alive(req["ppid"])
            if orphaned or conn in ready and not conn.recv(64):  # the client (or the spawner) is gone
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                break
    finally:
        os._exit(0)


def serve(sock_path: str) -> None:
    """Import everything once, then fork a stage per request until the parent goes."""
    import importlib
    import multiprocessing.spawn

    parent = os.getppid()
    for name in PRELOAD:
        importlib.import_module(name)
    # the forks' own pools spawn their workers through the shim: forks of this server too
    multiprocessing.spawn.set_executable(os.path.join(os.path.dirname(sock_path), "bin", "python"))
    # numba's CPU target loads its typing and lowering registries (about 70 modules) on a process's
    # first jitted call, a cached kernel's too: 0.45 CPU-s a fork on an Intel, loaded here once
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()
    cpu_target.typing_context.refresh()
    import threading

    # torch, Lightning and pyarrow's jemalloc each start an idle native thread at import, as they do
    # in every process PyTorch's DataLoader forks its workers from; a Python thread would be ours
    if threading.active_count() != 1:
        print(f"warm server: Python threads {threading.enumerate()} after the imports; not serving",
              file=sys.stderr, flush=True)
        return
    mine = _import_time_env(os.environ)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the watchers are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock_path + ".tmp")
    listener.listen(64)
    os.rename(sock_path + ".tmp", sock_path)
    print(f"serving: {len(PRELOAD)} modules imported", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    while os.getppid() == parent:
        if not select.select([listener], [], [], 1.0)[0]:
            continue
        conn, _ = listener.accept()
        try:
            req, fds = _recv_request(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        differs = sorted(k for k in _import_time_env(req["env"]).keys() | mine.keys()
                         if req["env"].get(k) != mine.get(k))
        if req.get("spawn"):
            known = len(fds) == len(req.get("fds", ())) and {0, 1, 2} <= set(req["fds"])
        else:
            known = (os.path.dirname(req["argv"][0]) == SCRIPTS if req.get("script")
                     else req["argv"][0] in MODULES) and len(fds) == 3
        if differs or not known:
            print("real:", req["cwd"], *req["argv"][:3], "(differs:", *differs, ")", flush=True)
            conn.sendall(b"real\n")
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        if req.get("spawn"):
            print("spawn:", req["cwd"], req["ppid"], flush=True)
        else:
            print("fork:", req["cwd"], *req["argv"][:3], flush=True)
        if os.fork() == 0:
            _watch(conn, listener, req, fds)
        conn.close()
        for fd in fds:
            os.close(fd)


class WarmServer:
    """The server for a test run and its shim directory (``bin``): started once
    in pytest's main process, used by every test process of the run
    (:meth:`attach`). Its log, ``warm.log``, has a line per request: ``fork:``
    or ``real:``, the request's working directory and its first arguments."""

    def __init__(self, root: Path, *, start: bool = True) -> None:
        self.root = root
        self.sock = str(root / "warm.sock")
        self.bin = root / "bin"
        self.python, self.zeroloop = str(self.bin / "python"), str(self.bin / "zeroloop")
        self.proc: subprocess.Popen | None = None
        if start:
            self._start()

    @classmethod
    def attach(cls, root: Path) -> WarmServer:
        """The server another process started in ``root``."""
        return cls(root, start=False)

    def _start(self) -> None:
        root = self.root
        self.bin.mkdir(parents=True, exist_ok=True)
        bin_dir = Path(sys.executable).parent
        for name, module, what in (("python", None, "``python -m`` of the stages or a benchmark script"),
                                   ("zeroloop", "zeroloop", "the ``zeroloop`` command")):
            shim = self.bin / name
            shim.write_text(SHIM.format(python=sys.executable, real=str(bin_dir / name), sock=self.sock,
                                        module=module, modules=MODULES, what=what, scripts=SCRIPTS))
            shim.chmod(0o755)
        self.log = open(root / "warm.log", "w")
        self.proc = subprocess.Popen([sys.executable, __file__, self.sock], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        Path(self.sock + ".pid").write_text(str(self.proc.pid))  # the shims wait while it imports

    def _alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        try:
            return _alive(int(Path(self.sock + ".pid").read_text()))
        except (OSError, ValueError):
            return False

    def ready(self, timeout: float = 120) -> bool:
        """Wait for the socket (test_warm checks the forks themselves)."""
        deadline = time.time() + timeout
        while not os.path.exists(self.sock):
            if not self._alive() or time.time() > deadline:
                return False
            time.sleep(0.1)
        return True

    def close(self) -> None:
        """Stop the server, where this process started it."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


if __name__ == "__main__":
    serve(sys.argv[1])
