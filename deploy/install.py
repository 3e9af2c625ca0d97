"""Install zeroloop and its extras into a virtual environment, fast.

`make setup` runs it with the venv's own Python: ``python deploy/install.py
solver,dev,postgres,auth``. It installs with uv (from PyPI, into the venv),
which resolves and downloads in parallel: a fresh venv in about 20-30 s where
pip takes 60-100 s (docs/lab/suite-timings.md). uv does not read pip's
configuration, so the settings that decide *which* files are installed are
carried over from ``pip config list`` (the environment's ``PIP_*`` variables
included): find-links, constraints, the index and extra indexes, no-index,
and the certificate bundle. Where uv cannot be installed or fails, the same
install runs with pip, as before, after one line saying why. `make setup`
makes the venv without pip (ensurepip took 8 s on a Zen 3): uv is installed
into it by the base interpreter's pip (``--prefix``), and pip by uv.

Either way it then compiles the installed packages and zeroloop's own source
(``src/``, installed editable, which installers leave out) to bytecode: where
PYTHONDONTWRITEBYTECODE is set nothing would ever write it, and every new
interpreter (a stage's workers, a Ray task's) compiled the modules it imports
afresh. The packages are compiled here rather than by uv's
``--compile-bytecode``, which compiled the packages' own test folders too and
took about 1.5x as long: each core's process compiles a share of the files in
one go, and folders named ``tests`` or ``test`` (nothing outside them imports
them) are left out.
"""

from __future__ import annotations

import ast
import compileall
import importlib.util
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: pip settings (as ``pip config list`` names them) -> uv's options; the lists split on whitespace.
_LISTS = {"find-links": "--find-links", "constraint": "--constraint", "extra-index-url": "--extra-index-url"}


def pip_command() -> list[str]:
    """A pip for this venv: its own, else the base interpreter's (a venv made
    ``--without-pip``, as `make setup` makes it: ensurepip took 8 of a Zen 3's
    8.2 s there), else its own after ``ensurepip``."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    base = getattr(sys, "_base_executable", None)
    if base and base != sys.executable and subprocess.run([base, "-m", "pip", "--version"],
                                                          capture_output=True).returncode == 0:
        return [base, "-m", "pip"]
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], capture_output=True, check=True)
    return [sys.executable, "-m", "pip"]


def pip_settings(pip: list[str] | None = None) -> dict[str, str]:
    """pip's configuration as ``pip config list`` prints it, the environment's
    ``PIP_*`` variables over the files' (``:env:`` keys)."""
    pip = pip or [sys.executable, "-m", "pip"]
    out = subprocess.run([*pip, "config", "list"], capture_output=True, text=True)
    files: dict[str, str] = {}
    env: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, sep, value = line.partition("=")
        if not sep or "." not in name:
            continue
        scope, _, key = name.rpartition(".")
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            continue
        (env if scope == ":env:" else files)[key] = str(value)
    return {**files, **env}


def uv_options(settings: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's command-line options and environment for pip's ``settings``."""
    options: list[str] = []
    for key, flag in _LISTS.items():
        for value in settings.get(key, "").split():
            options += [flag, value]
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    if settings.get("extra-index-url"):  # pip takes the best version over every index; uv stops at the first
        options += ["--index-strategy", "unsafe-best-match"]
    env = {}
    if settings.get("cert") and "SSL_CERT_FILE" not in os.environ:
        env["SSL_CERT_FILE"] = settings["cert"]
    return options, env


def compile_source(root: Path = ROOT / "src") -> bool:
    """Compile the Python files under ``root`` to bytecode (``__pycache__``
    beside each); whether every file compiled."""
    return bool(compileall.compile_dir(str(root), quiet=1))


#: folders left out: the packages' own test suites, which no installed module imports
_SKIPPED = {"__pycache__", "tests", "test"}


def _package_roots() -> list[str]:
    return sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})


def package_files(roots: list[str] | None = None) -> list[str]:
    """The Python files under the install's package folders (``roots``; this
    interpreter's by default), test folders left out."""
    found = []
    for root in _package_roots() if roots is None else roots:
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = [d for d in subfolders if d not in _SKIPPED]
            found += [os.path.join(folder, name) for name in names if name.endswith(".py")]
    return found


def _compile_files(paths: list[str]) -> None:
    for path in paths:
        compileall.compile_file(path, quiet=2)


def compile_packages(files: list[str] | None = None, processes: int | None = None) -> None:
    """Compile ``files`` (:func:`package_files` by default) to bytecode, a
    process per core, each its share in one go (compileall's own ``workers``
    sends every file to its pool separately: a third more CPU). Silent,
    whatever fails: some packages ship files for newer Pythons (torch's
    ``py312_intrinsics.py``), which no install compiles."""
    from concurrent.futures import ProcessPoolExecutor

    files = package_files() if files is None else files
    if not processes:
        processes = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    # round-robin over the files by size, largest first: even shares
    files = sorted(files, key=lambda f: -os.path.getsize(f))
    shares = [files[i::processes * 4] for i in range(processes * 4)]
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_compile_files, shares))


def main(argv: list[str]) -> int:
    code = _install(argv)
    if code == 0:
        compile_packages()
    if code == 0 and not compile_source():
        print("deploy/install.py: some of src/ did not compile to bytecode (above)", file=sys.stderr)
        return 1
    return code


def _install(argv: list[str]) -> int:
    extras = argv[0] if argv else ""
    target = f"{ROOT}[{extras}]" if extras else str(ROOT)
    pip = pip_command()
    # into this venv whichever interpreter's pip it is (scripts in its bin/)
    into = [] if pip[0] == sys.executable else ["--prefix", sys.prefix]
    quiet = ["--quiet", "--disable-pip-version-check", "--root-user-action=ignore"]
    why = None
    if subprocess.run([*pip, "install", *quiet, *into, "uv"]).returncode != 0:
        why = "uv could not be installed"
    else:
        options, env = uv_options(pip_settings(pip))
        uv = Path(sys.executable).with_name("uv")
        # pip too: the docs' `.venv/bin/pip install ...` (a venv made without it has none)
        cmd = [str(uv), "pip", "install", "--quiet", "--python", sys.executable, *options, "-e", target,
               "pip"]
        if subprocess.run(cmd, env={**os.environ, **env}).returncode == 0:
            return 0
        why = "uv's install failed (above)"
    print(f"deploy/install.py: {why}; installing with pip instead (slower)", file=sys.stderr, flush=True)
    if importlib.util.find_spec("pip") is None:
        subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], capture_output=True)
    return subprocess.run([sys.executable, "-m", "pip", "install", *quiet, "-e", target]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
