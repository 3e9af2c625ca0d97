"""``zeroloop pull`` (``make pull``): the team recipe's ``dvc pull``, with
the DVC remote checked first.

When a folder remote is gone (removed, moved, a share not mounted), ``dvc
pull`` says "Checkout failed ... Is your cache up to date?" and never names
the remote. Here a folder that is not there stops the pull before it starts,
in one line naming the remote and the folder; a URL remote (s3://, ssh://,
...) cannot be checked without the network, so when ``dvc pull`` fails the
last line names the remote and its URL.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class RemoteError(ValueError):
    """The remote cannot be used; the message is one line."""


@dataclass(frozen=True)
class Remote:
    name: str
    url: str  # a folder remote's url is an absolute path (DVC resolves it against .dvc/)

    @property
    def is_folder(self) -> bool:
        return "://" not in self.url


def find_remote(name: str | None = None) -> Remote:
    """The DVC remote called ``name`` or, without one, the default remote of
    the repository around the working directory (DVC's config levels merged)."""
    from dvc.config import Config, ConfigError
    from dvc.exceptions import NotDvcRepoError

    try:
        config = Config.from_cwd()
    except NotDvcRepoError:
        raise RemoteError("no DVC repository here: run it in the project's folder") from None
    except ConfigError as exc:
        raise RemoteError(f"DVC's config cannot be read: {exc}") from None
    remotes = config.get("remote", {})
    name = name or config.get("core", {}).get("remote")
    if not name:
        raise RemoteError("no default DVC remote: add one with `dvc remote add -d NAME FOLDER-OR-URL` "
                          "(docs/cluster.md, Shared data and models)")
    if name not in remotes:
        raise RemoteError(f"no DVC remote named {name!r} (remotes: {', '.join(remotes) or 'none'})")
    return Remote(name, str(remotes[name]["url"]))


def remote_problem(remote: Remote) -> str | None:
    """Why ``remote`` cannot be pulled from, or None when it may be: a folder
    remote must be a folder that exists; a URL is not checked (the network)."""
    if not remote.is_folder:
        return None
    path = Path(remote.url)
    if not path.exists():
        return (f"DVC remote {remote.name!r} is the folder {path}, which does not exist (removed, moved or "
                f"not mounted?): restore it, or point the remote at it with "
                f"`dvc remote modify {remote.name} url FOLDER`")
    if not path.is_dir():
        return f"DVC remote {remote.name!r} is {path}, which is a file, not a folder"
    return None


def _dvc() -> str:
    here = Path(sys.executable).parent / "dvc"  # the project's environment first
    return str(here) if here.exists() else shutil.which("dvc") or "dvc"


def pull(name: str | None = None) -> int:
    """Check the remote, then run ``dvc pull`` from it; 2 with one line when
    the remote is missing, DVC's own status when the pull fails."""
    try:
        remote = find_remote(name)
        if problem := remote_problem(remote):
            raise RemoteError(f"{problem}; nothing was pulled")
    except RemoteError as exc:
        print(f"zeroloop pull: error: {exc}", file=sys.stderr)
        return 2
    rc = subprocess.run([_dvc(), "pull", "--remote", remote.name]).returncode
    if rc != 0:
        print(f"zeroloop pull: error: dvc pull from remote {remote.name!r} ({remote.url}) failed (DVC's "
              "messages above): check that it is reachable and that whoever ran the pipeline ran "
              "`dvc push` to it", file=sys.stderr)
    return rc
