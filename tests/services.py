"""Real servers for the team-setup tests, on localhost: a throwaway PostgreSQL
cluster and an MLflow tracking server (optionally with basic auth).

PostgreSQL refuses to run as root: as root the cluster belongs to the
unprivileged ``postgres`` user (run through ``runuser``); as anyone else it is
the caller's own. Where the binaries are missing, ``postgres_bin()`` says so
and the tests skip with that one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import yaml

from zeroloop.pipeline.params import parse_params

BIN = Path(sys.executable).parent
#: how the tests start Python, a stage and the ``zeroloop`` command
PYTHON = [sys.executable]
STAGES = [sys.executable, "-m", "zeroloop.pipeline.stages"]
ZEROLOOP = [str(BIN / "zeroloop")]
PG_DIRS = [Path("/usr/lib/postgresql/15/bin"),
           *sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_processes(temp: str) -> list:
    """Every process of the Ray cluster started with ``--temp-dir=temp``: those
    whose command line names it, and their descendants (Ray retitles its
    workers ``ray::...``, so only their parentage tells whose they are). Tests
    stop their own cluster with these, never `ray stop`, which stops every
    Ray on the machine, another test's too."""
    import psutil

    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["cmdline"]):
        if temp in " ".join(proc.info["cmdline"] or []):
            found[proc.pid] = proc
            try:
                found.update({child.pid: child for child in proc.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
    return list(found.values())


def kill_all(procs: list) -> None:
    import psutil

    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def postgres_bin() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    for d in PG_DIRS:
        if (d / "initdb").is_file() and (d / "pg_ctl").is_file():
            return d
    found = shutil.which("pg_ctl")
    return Path(found).parent if found and shutil.which("initdb") else None


def why_no_postgres() -> str | None:
    """One line when a throwaway cluster cannot be started here, else None."""
    if postgres_bin() is None:
        return "PostgreSQL binaries (initdb, pg_ctl) not found: apt-get install postgresql"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user to own the cluster"
        if not shutil.which("runuser"):
            return "running as root without `runuser` to start PostgreSQL as `postgres`"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg (3) is not installed: pip install -e '.[postgres]'"
    return None


class Postgres:
    """A throwaway PostgreSQL cluster in a temporary folder on a free port,
    trusting local connections; ``url(db)`` gives a SQLAlchemy URL."""

    def __init__(self) -> None:
        self.bin = postgres_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="zlpg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user = "zeroloop"
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        self.start()

    def _run(self, tool: str, *args: str, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.dir)
        if check and out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stdout[-1500:]}{out.stderr[-1500:]}")
        return out

    def start(self) -> None:
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w",
                  "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop", check=False)

    def restart(self, down_s: float = 0.0) -> None:
        """Stop (fast: open connections are cut), stay down ``down_s`` seconds, start again."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=self.user, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def url(self, db: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def close(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


def write_params(root: Path, data: dict) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(parse_params(data).to_yaml_data(), sort_keys=False))


def stage(root: Path, env: dict, *args: str, check: bool = True, timeout: float = 600):
    out = subprocess.run([*STAGES, *args], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert out.returncode == 0, f"{args} failed:\n{out.stderr[-3000:]}"
    return out


def venv_path() -> str:
    """PATH for stages and tools: the venv, then this process's PATH."""
    return os.pathsep.join([str(BIN), os.environ["PATH"]])


def clean_env(**extra: str) -> dict:
    """This process's environment without tracking or cluster settings, the venv first on PATH."""
    drop = ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD",
            "MLFLOW_FLASK_SERVER_SECRET_KEY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(RAY_USAGE_STATS_ENABLED="0", PATH=venv_path(), **extra)
    return env


#: Ray 2.60's `ray start` turns token authentication on; every process that joins needs the token.
RAY_TOKEN = os.urandom(32).hex()
#: The head finds a dead node within ~2 s (Ray's defaults: 3 s x 5 failed health checks)
FAST_HEALTH_CHECKS = {"RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "500",
                      "RAY_health_check_failure_threshold": "3"}


def ray_env(**extra: str) -> dict:
    """:func:`clean_env` with the token of :class:`RayNodes`' cluster."""
    return clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=RAY_TOKEN, **extra)


class RayNodes:
    """A real multi-node Ray cluster on 127.0.0.1 (`ray start --head`, then
    `ray start --address` twice, token auth on): a head with no CPU for tasks
    and two worker nodes with one CPU each, so every task runs on a worker
    node and two at once means one on each. test_ray_nodes' tests share one:
    the first kills a worker node, the last what is left, head and all (each
    `ray start --head` is about 8 CPU-s on a Zen 3); :meth:`ensure` starts it
    afresh for a test that finds the nodes it needs dead. The nodes share the
    temp dir (short: Ray's socket paths have a length limit), each its own
    sockets."""

    SOCKETS = ("raylet", "raylet.1", "raylet.2")  # the head's, then the worker nodes' in their order

    def __init__(self) -> None:
        self.temp: str | None = None
        self.address = ""

    def _ray(self, *args: str) -> None:
        out = subprocess.run([str(BIN / "ray"), *args], env=ray_env(**FAST_HEALTH_CHECKS),
                             capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]

    def socket(self, node: int) -> str:
        """The raylet socket of node ``node`` (0 the head, 1 and 2 the worker nodes)."""
        return str((Path(self.temp) / "session_latest").resolve() / "sockets" / self.SOCKETS[node])

    def alive(self) -> list[int]:
        """The nodes (0 the head, 1 and 2 the worker nodes) whose raylet is running."""
        if self.temp is None:
            return []
        import psutil

        sockets = {self.socket(n): n for n in range(3)}
        running = set()
        for proc in ray_processes(self.temp):
            try:
                if proc.name() != "raylet":  # its agents name its socket too
                    continue
                cmd = proc.cmdline()
            except psutil.NoSuchProcess:
                continue
            named = (arg.partition("=")[2] for arg in cmd if arg.startswith("--raylet_socket_name="))
            running |= {sockets.get(name) for name in named}
        return sorted(n for n in running if n is not None)

    def ensure(self, workers: int = 2) -> tuple[str, str]:
        """(address, temp dir) of a cluster whose head and at least ``workers``
        worker nodes are running: this one, or a new one."""
        alive = self.alive()
        if 0 in alive and len(alive) > workers:
            return self.address, self.temp
        self.close()
        self.temp = tempfile.mkdtemp(prefix="zn", dir="/tmp")
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        common = ["--node-ip-address=127.0.0.1", f"--temp-dir={self.temp}", "--object-store-memory=100000000",
                  "--disable-usage-stats"]
        self._ray("start", "--head", f"--port={port}", "--num-cpus=0", "--include-dashboard=false", *common)
        for _ in range(2):
            self._ray("start", f"--address={self.address}", "--num-cpus=1", *common)
        ask = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
               "print(json.dumps(sorted(n['Resources'].get('CPU', 0) for n in ray.nodes() if n['Alive'])))")
        out = subprocess.run([sys.executable, "-c", ask % self.address], env=ray_env(), capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        # two tasks at once can only run one on each worker node
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, 1, 1]
        return self.address, self.temp

    def close(self) -> None:
        if self.temp is not None:
            kill_all(ray_processes(self.temp))  # not `ray stop`: it would stop another test's cluster too
            shutil.rmtree(self.temp, ignore_errors=True)
            self.temp = None


#: ``MLFLOW_SERVER_ENABLE_JOB_EXECUTION`` for the test servers: MLflow 3's job runner (GenAI judges and
#: issue detection, which zeroloop does not use) is 8 more processes a server start, about 8 s of CPU
NO_JOB_RUNNER = "false"


def _the_server_process(wrapper: int) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the uvicorn process that ``mlflow server`` (pid
    ``wrapper``) started."""
    import psutil

    for child in psutil.Process(wrapper).children():
        try:
            if "uvicorn" in " ".join(child.cmdline()):
                return child.cmdline(), child.environ()
        except psutil.NoSuchProcess:
            continue
    raise RuntimeError(f"mlflow server (pid {wrapper}) answers but started no uvicorn process")


class MlflowServer:
    """``mlflow server`` on 127.0.0.1 over ``backend_uri``, artifacts proxied to
    ``artifacts``; ``auth`` runs MLflow's basic-auth app with the admin
    credentials given (its users live in ``auth_db``)."""

    def __init__(self, backend_uri: str, artifacts: Path, *, auth: tuple[str, str] | None = None,
                 workdir: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir or artifacts.parent
        cmd = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(self.port),
               "--workers", "1", "--backend-store-uri", backend_uri,
               "--artifacts-destination", str(artifacts)]
        env = clean_env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION=NO_JOB_RUNNER)
        if auth:
            ini = self.workdir / "basic_auth.ini"
            # as docs/cluster.md: the file holds no secret; the admin's credentials come from the environment
            ini.write_text("[mlflow]\ndefault_permission = READ\n"
                           f"database_uri = sqlite:///{self.workdir / 'auth.db'}\n"
                           "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                           "auth_cache_ttl_seconds = 300\n")
            env.update(MLFLOW_AUTH_CONFIG_PATH=str(ini), MLFLOW_FLASK_SERVER_SECRET_KEY="test-secret",
                       MLFLOW_AUTH_ADMIN_USERNAME=auth[0], MLFLOW_AUTH_ADMIN_PASSWORD=auth[1])
            cmd += ["--app-name", "basic-auth"]
        self.cmd, self.env = cmd, env
        self.log = open(self.workdir / f"mlflow-server-{self.port}.log", "w")  # noqa: SIM115
        self.server: tuple[list[str], dict[str, str]] | None = None
        self.start()

    def start(self) -> None:
        """The first start runs ``mlflow server``; a restart runs the server process it started
        (the same command and environment, a new boot id) without the wrapper around it, whose
        imports are half of a start's CPU."""
        if self.server is None:
            cmd, env = self.cmd, self.env
        else:
            cmd, env = self.server[0], {**self.server[1], "_MLFLOW_SERVER_BOOT_ID": uuid.uuid4().hex}
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     text=True, start_new_session=True, cwd=self.workdir)
        self.wait_ready()
        if self.server is None:
            self.server = _the_server_process(self.proc.pid)

    def stop(self) -> None:
        """The server and its workers killed; :meth:`start` brings it back on the same port."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError:
                return  # it answers (basic auth may guard /health)
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise RuntimeError(f"no MLflow server: {Path(self.log.name).read_text()[-3000:]}")
            time.sleep(0.2)

    def close(self) -> None:
        self.stop()
        self.log.close()
