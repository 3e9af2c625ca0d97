"""Install zeroloop and its extras into a virtual environment, fast.

`make setup` runs it with the venv's own Python: ``python deploy/install.py
solver,dev,postgres,auth``. It installs with uv (from PyPI, into the venv),
which resolves and downloads in parallel: a fresh venv in about 20-30 s where
pip takes 60-100 s (docs/development.md). uv does not read pip's
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
afresh (a stage's imports took twice as long: docs/development.md). The
packages are compiled here rather than by uv's ``--compile-bytecode``, which
took 74 s of a Zen 3's 85-second install (150 CPU-s, as much as compileall's
own ``workers``, which hand their pool one file at a time) and compiled the
packages' own test folders too. Here each core's process compiles a share of
the files in one go, and folders named ``tests`` or ``test`` (a fifth of the
bytes; nothing outside them imports them) are left out: 47 s, 91 CPU-s. So
are the folders and large files listed in ``deploy/bytecode-skip.txt``, which
neither the pipeline nor its suite ever imports (a third of what is left: Ray's
RLlib, Databricks' SDK, torch's Inductor backends ...); ``python
deploy/install.py --unread`` writes that list again from a venv the suite has
just run in. A module edited later, or one left out, is compiled in memory as
before: Python checks each file's stamp.
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

#: folders (ending in ``/``) and files, relative to the package folder, that no run imports
SKIP_LIST = ROOT / "deploy" / "bytecode-skip.txt"


def _package_roots() -> list[str]:
    return sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})


def read_skip_list(path: Path = SKIP_LIST) -> set[str]:
    """The entries of a skip list: one path a line, ``#`` comments and blank lines ignored."""
    if not path.is_file():
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def package_files(roots: list[str] | None = None, skip: set[str] | None = None) -> list[str]:
    """The Python files under the install's package folders (``roots``; this
    interpreter's by default), test folders and the entries of ``skip``
    (:data:`SKIP_LIST`'s by default) left out."""
    roots = _package_roots() if roots is None else roots
    skip = read_skip_list() if skip is None else skip
    found = []
    for root in roots:
        for folder, subfolders, names in os.walk(root):
            rel = os.path.relpath(folder, root)
            prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            subfolders[:] = [d for d in subfolders if d not in _SKIPPED and f"{prefix}{d}/" not in skip]
            found += [os.path.join(folder, name) for name in names
                      if name.endswith(".py") and prefix + name not in skip]
    return found


def unread_entries(root: str, min_bytes: int = 64_000) -> list[tuple[int, str]]:
    """What no process has read of ``root``'s compiled packages since they
    were compiled, as (bytecode bytes, entry) for :data:`SKIP_LIST`: each
    largest folder none of whose bytecode was read, and each unread file
    outside those, of ``min_bytes`` or more, largest first. A file's bytecode
    was read when its access time is past its modification time (Linux's
    default ``relatime`` records the first read after a write); raises
    ``ValueError`` where nothing was read (a filesystem mounted ``noatime``)."""
    sizes: dict[str, tuple[int, bool]] = {}
    for folder, _, names in os.walk(root):
        if os.path.basename(folder) != "__pycache__":
            continue
        source = os.path.relpath(os.path.dirname(folder), root).replace(os.sep, "/")
        for name in names:
            if name.endswith(".pyc"):
                st = os.stat(os.path.join(folder, name))
                module = name.split(".", 1)[0] + ".py"
                sizes[module if source == "." else f"{source}/{module}"] = (st.st_size,
                                                                            st.st_atime > st.st_mtime)
    if not any(read for _, read in sizes.values()):
        raise ValueError(f"no bytecode under {root} was read since it was written: are access times "
                         "recorded there (a noatime mount)?")
    total: dict[str, int] = {}
    read: dict[str, bool] = {}
    for path, (size, was_read) in sizes.items():
        parts = path.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            total[folder] = total.get(folder, 0) + size
            read[folder] = read.get(folder, False) or was_read
    unread = {folder for folder, was_read in read.items() if not was_read}

    def under_unread(path: str) -> bool:
        parts = path.split("/")
        return any("/".join(parts[:i]) in unread for i in range(1, len(parts)))

    entries = [(total[f], f + "/") for f in unread if not under_unread(f)]
    entries += [(size, path) for path, (size, was_read) in sizes.items()
                if not was_read and not under_unread(path)]
    return sorted((e for e in entries if e[0] >= min_bytes), key=lambda e: (-e[0], e[1]))


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


def write_unread(min_kb: int = 64) -> int:
    """``--unread``: :data:`SKIP_LIST` written afresh from this venv's access times."""
    entries = []
    for root in _package_roots():
        try:
            entries += unread_entries(root, min_kb * 1000)
        except ValueError as exc:
            print(f"deploy/install.py: {exc}", file=sys.stderr)
            return 1
    head = ["# Bytecode `make setup` does not compile (deploy/install.py): what no process read in",
            "# a venv the suite ran in, as `python deploy/install.py --unread` found it (entries of",
            f"# {min_kb} KB of bytecode or more; a folder ends in /). Compiled on demand where imported."]
    SKIP_LIST.write_text("\n".join(head + [e for _, e in sorted(entries, key=lambda e: e[1])]) + "\n")
    kb = sum(size for size, _ in entries) // 1000
    print(f"{SKIP_LIST.relative_to(ROOT)}: {len(entries)} entries, {kb} KB of bytecode")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--unread"]:
        return write_unread(*(int(a) for a in argv[1:2]))
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
