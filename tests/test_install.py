"""`make setup`'s installer (deploy/install.py): uv installs with the settings
pip would have used, so the same files land (this machine's local CPU wheel
of torch and its constraints file come from pip's configuration)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("zeroloop_install", ROOT / "deploy" / "install.py")
install = sys.modules["zeroloop_install"] = importlib.util.module_from_spec(_spec)  # its pool pickles by name
_spec.loader.exec_module(install)


def test_pips_files_and_environment_become_uvs_options(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nconstraint = /k/constraints.txt\nfind-links = /from/the/file\n"
                    "extra-index-url = file:///one/simple https://two/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_FIND_LINKS", "/a /b")  # the environment over the files, as pip reads them
    monkeypatch.setenv("PIP_CERT", "/certs/bundle.pem")
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    settings = install.pip_settings()
    assert settings["find-links"] == "/a /b" and settings["constraint"] == "/k/constraints.txt"
    options, env = install.uv_options(settings)
    pairs = list(zip(options[::2], options[1::2]))
    assert ("--find-links", "/a") in pairs and ("--find-links", "/b") in pairs
    assert ("--find-links", "/from/the/file") not in pairs
    assert ("--constraint", "/k/constraints.txt") in pairs
    assert ("--extra-index-url", "file:///one/simple") in pairs
    assert ("--extra-index-url", "https://two/simple") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's choice over every index
    assert env == {"SSL_CERT_FILE": "/certs/bundle.pem"}


def test_no_index_and_an_own_index_carry_over():
    options, env = install.uv_options({"index-url": "https://mirror/simple", "no-index": "true"})
    assert options == ["--index-url", "https://mirror/simple", "--no-index"]
    assert install.uv_options({})[0] == []


def test_the_installed_venv_is_the_one_this_suite_runs_in():
    """The suite runs in what `make setup` installed: torch as pinned, with its bytecode
    compiled (without it every stage's imports took twice as long where
    PYTHONDONTWRITEBYTECODE is set: docs/lab/suite-timings.md). Found, not imported: a new
    interpreter importing them was 6 CPU-s of the suite."""
    from importlib.metadata import version

    assert version("torch").split("+")[0] == "2.13.0"
    assert (Path(sys.prefix) / "bin" / "pip").is_file()  # the docs' `.venv/bin/pip install`: a venv made
    # without pip gets it from uv
    assert Path(importlib.util.find_spec("torch").origin).is_relative_to(sys.prefix)  # the venv's own
    for module in ("mlflow", "torch.nn.modules.conv", "zeroloop.pipeline.stages"):
        source = importlib.util.find_spec(module).origin
        cached = importlib.util.cache_from_source(source)
        assert Path(cached).exists(), f"{cached}: {module} without its compiled bytecode (make setup)"


@pytest.mark.slow
def test_the_install_compiles_zeroloops_own_source(tmp_path):
    """`make setup` compiles src/ too (installed editable, the installers leave it out), and
    an interpreter that may not write bytecode reads what it wrote."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("X = 1\n")
    assert install.compile_source(tmp_path)
    cached = Path(importlib.util.cache_from_source(str(pkg / "mod.py")))
    assert cached.exists()
    out = subprocess.run([sys.executable, "-B", "-v", "-c", "import pkg.mod"], cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert f"matches {pkg / 'mod.py'}" in out.stderr, out.stderr[-2000:]
    (pkg / "bad.py").write_text("def (:\n")
    assert not install.compile_source(tmp_path)


def test_the_install_compiles_the_packages_but_not_their_test_folders(tmp_path):
    """`make setup` compiles the installed packages itself, each core's process its share (uv's
    compiling took 74 s of an 85-second install on a Zen 3), leaving out the packages' own
    test folders; a file that does not compile (a newer Python's syntax) stops nothing."""
    files = {"pkg/__init__.py": "", "pkg/mod.py": "X = 1\n", "pkg/sub/deep.py": "Y = 2\n",
             "pkg/newer.py": "def f[T](a): pass\n", "pkg/tests/test_mod.py": "Z = 3\n",
             "pkg/sub/test/helper.py": "W = 4\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = install.package_files([str(tmp_path)])
    assert sorted(Path(f).relative_to(tmp_path).as_posix() for f in found) == [
        "pkg/__init__.py", "pkg/mod.py", "pkg/newer.py", "pkg/sub/deep.py"]
    install.compile_packages(found, processes=2)
    cached = {name: Path(importlib.util.cache_from_source(str(tmp_path / name))) for name in files}
    compiled = {name for name, pyc in cached.items() if pyc.exists()}
    assert compiled == {"pkg/__init__.py", "pkg/mod.py", "pkg/sub/deep.py"}
