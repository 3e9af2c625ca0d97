"""`make pull` (`zeroloop pull`): the team recipe's `dvc pull`, which first
checks that the DVC remote is there and names it when it is not."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
ENV = dict(os.environ, DVC_NO_ANALYTICS="1")


def _run(*cmd, cwd: Path) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


def _pull(cwd: Path) -> subprocess.CompletedProcess:
    """The recipe's `make pull`, with this interpreter's environment as the project's .venv."""
    return subprocess.run(["make", "-s", "pull", f"BIN={BIN}", "STAMP="], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=120)


def _own_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [x for x in out.stderr.strip().splitlines() if not x.startswith("make")]  # make's "*** Error 2"


@pytest.mark.slow
def test_pull_names_a_removed_remote_folder_and_pulls_once_it_is_back(tmp_path):
    """A teammate's clone whose folder remote was removed: one line names the
    folder (not DVC's "Checkout failed ... Is your cache up to date?"), and
    nothing is lost: once the folder is back the same command pulls."""
    repo, remote, clone = tmp_path / "repo", tmp_path / "dvc-remote", tmp_path / "clone"
    repo.mkdir()
    _run("git", "init", "-q", cwd=repo)
    _run(BIN / "dvc", "init", "-q", cwd=repo)
    # what `dvc remote add -d shared FOLDER` writes (a DVC call less)
    (repo / ".dvc/config").write_text(
        f'[core]\n    remote = shared\n[\'remote "shared"\']\n    url = {remote}\n')
    shutil.copy(ROOT / "Makefile", repo)
    (repo / "models").mkdir()
    (repo / "models/champion.pt").write_bytes(b"weights")
    _run(BIN / "dvc", "add", "-q", "models/champion.pt", cwd=repo)
    _run(BIN / "dvc", "push", "-q", cwd=repo)
    _run("git", "add", "-A", cwd=repo)
    _run(*GIT, "commit", "-qm", "run", cwd=repo)
    _run("git", "clone", "-q", repo, clone, cwd=tmp_path)

    remote.rename(tmp_path / "moved")
    out = _pull(clone)
    assert out.returncode != 0
    lines = _own_lines(out)
    assert len(lines) == 1, out.stderr
    assert f"'shared' is the folder {remote}, which does not exist" in lines[0], lines[0]
    assert not (clone / "models/champion.pt").exists()

    (tmp_path / "moved").rename(remote)
    out = _pull(clone)
    assert out.returncode == 0, out.stderr
    assert (clone / "models/champion.pt").read_bytes() == b"weights"


@pytest.mark.slow
def test_pull_without_a_default_remote_says_how_to_add_one(tmp_path):
    _run("git", "init", "-q", cwd=tmp_path)
    _run(BIN / "dvc", "init", "-q", cwd=tmp_path)
    shutil.copy(ROOT / "Makefile", tmp_path)
    out = _pull(tmp_path)
    assert out.returncode != 0
    lines = _own_lines(out)
    assert len(lines) == 1, out.stderr
    assert "no default DVC remote" in lines[0] and "dvc remote add -d" in lines[0], lines[0]
