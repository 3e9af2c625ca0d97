"""Install zeroloop and its extras into a virtual environment, fast.

`make setup` runs it with the venv's own Python: ``python deploy/install.py
solver,dev,postgres,auth``. It installs with uv (from PyPI, into the venv),
which resolves and downloads in parallel: a fresh venv in about 20-30 s where
pip takes 60-100 s (docs/development.md). uv does not read pip's
configuration, so the settings that decide *which* files are installed are
carried over from ``pip config list`` (the environment's ``PIP_*`` variables
included): find-links, constraints, the index and extra indexes, no-index,
and the certificate bundle. Where uv cannot be installed or fails, the same
install runs with pip, as before, after one line saying why.

Either way it then compiles the installed packages and zeroloop's own source
(``src/``, installed editable, which installers leave out) to bytecode: where
PYTHONDONTWRITEBYTECODE is set nothing would ever write it, and every new
interpreter (a stage's workers, a Ray task's) compiled the modules it imports
afresh (a stage's imports took twice as long: docs/development.md). The
packages are compiled here rather than by uv's ``--compile-bytecode``, which
took 74 s of a Zen 3's 85-second install (150 CPU-s, as much as compileall's
own ``workers``, which hand their pool one file at a time) and compiled the
packages' own test folders too. Here each core's process compiles a share of
the files in one go, and folders named ``tests`` or ``test`` (a fifth of the
bytes; nothing outside them imports them) are left out: 47 s, 91 CPU-s. A
module edited later, or one left out, is compiled in memory as before: Python
checks each file's stamp.
"""

from __future__ import annotations

import ast
import compileall
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: pip settings (as ``pip config list`` names them) -> uv's options; the lists split on whitespace.
_LISTS = {"find-links": "--find-links", "constraint": "--constraint", "extra-index-url": "--extra-index-url"}


def pip_settings() -> dict[str, str]:
    """pip's configuration as ``pip config list`` prints it, the environment's
    ``PIP_*`` variables over the files' (``:env:`` keys)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
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


def package_files(roots: list[str] | None = None) -> list[str]:
    """The Python files under the install's package folders (``roots``; this
    interpreter's by default), test folders left out."""
    if roots is None:
        roots = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    found = []
    for root in roots:
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
    pip = [sys.executable, "-m", "pip", "install", "--quiet"]
    why = None
    if subprocess.run([*pip, "uv"]).returncode != 0:
        why = "uv could not be installed"
    else:
        options, env = uv_options(pip_settings())
        uv = Path(sys.executable).with_name("uv")
        cmd = [str(uv), "pip", "install", "--quiet", "--python", sys.executable, *options, "-e", target]
        if subprocess.run(cmd, env={**os.environ, **env}).returncode == 0:
            return 0
        why = "uv's install failed (above)"
    print(f"deploy/install.py: {why}; installing with pip instead (slower)", file=sys.stderr, flush=True)
    return subprocess.run([*pip, "-e", target]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
