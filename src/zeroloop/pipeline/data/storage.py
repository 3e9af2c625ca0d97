"""Files on disk: atomic writes, model files and data shards, each with metadata and a checksum.

A model file is ``MAGIC`` + one JSON header line + a torch payload. The header
names the game, the network's kind and shape (``net``: :meth:`NetConfig.to_dict`;
no ``kind`` is a resnet, as every file made before the kinds), the payload's
length and SHA-256, and any extra metadata; loading checks all of it and names
the file in every error.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from zeroloop.engine.games import Game, make_game
from zeroloop.engine.nn.net import NET_KINDS, NetConfig, PolicyValueNet

#: network keys that left the code after an ablation, and the last commit whose code reads them
REMOVED_NET_KEYS = {"opponent_policy": "cdcab39", "ownership": "72a4cf9", "soft_policy": "aacb397"}

MODEL_MAGIC = b"ZEROLOOP-MODEL 1\n"


class DamagedFileError(ValueError):
    """A file that is truncated, corrupted or of the wrong kind."""


@functools.cache
def _umask() -> int:
    """The process umask, read once on first use: reading it means setting it,
    which is not thread-safe, and a module must not change it at import time."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


class NoSpaceError(ValueError):
    """The disk filled up while a file was written (a one-line error: the
    stages report it and exit 2; the half-written file is gone)."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename, so readers
    (and a rerun after a kill) see the old file or the whole new one. A full
    disk raises :class:`NoSpaceError` naming the path."""
    import errno

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(f"{path}: no space left on the device; free some and rerun (files written "
                               "before are kept)") from None
        raise
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a file we publish gets the usual mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise NoSpaceError(f"{path}: no space left on the device ({len(data):,} bytes to write); free "
                               "some and rerun (files written before are kept)") from None
        raise


def write_json(path: str | os.PathLike, data: Any) -> None:
    """``data`` as indented JSON, written atomically."""
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file; a missing or damaged one raises an error that names it."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (run the stage that makes it first)") from None
    except json.JSONDecodeError as exc:
        raise DamagedFileError(f"{path}: damaged JSON ({exc.msg} at line {exc.lineno})") from None


def save_model(path: str | os.PathLike, net: PolicyValueNet, game: Game,
               meta: dict[str, Any] | None = None) -> None:
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in net.state_dict().items()}, buf)
    payload = buf.getvalue()
    header = {
        "game": game.name,
        "net": net.config.to_dict(),
        "payload_bytes": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "meta": meta or {},
    }
    atomic_write_bytes(path, MODEL_MAGIC + json.dumps(header).encode() + b"\n" + payload)


def read_model_header(path: str | os.PathLike) -> dict[str, Any]:
    header, _ = _read_model(Path(path))
    return header


def _read_model(path: Path) -> tuple[dict[str, Any], bytes]:
    return _read_checked(path, MODEL_MAGIC, "model")


def _read_checked(path: Path, magic: bytes, kind: str) -> tuple[dict[str, Any], bytes]:
    """Header and payload of a zeroloop file, verified against its checksum."""
    return _parse_checked(_read_bytes(path, kind), path, magic, kind)


def _read_bytes(path: Path, kind: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such {kind} file") from None
    except IsADirectoryError:
        raise FileNotFoundError(f"{path}: is a directory, not a {kind} file") from None
    except PermissionError:
        raise FileNotFoundError(f"{path}: cannot be read (permission denied)") from None


def _parse_checked(raw: bytes, path: Path, magic: bytes, kind: str) -> tuple[dict[str, Any], bytes]:
    """Header and payload of a zeroloop file's bytes ``raw``, read from ``path``."""
    if not raw.startswith(magic):
        raise DamagedFileError(f"{path}: not a zeroloop {kind} file (bad magic)")
    rest = raw[len(magic):]
    line, sep, payload = rest.partition(b"\n")
    try:
        header = json.loads(line)
        size, digest = int(header["payload_bytes"]), header["sha256"]
    except (ValueError, KeyError, TypeError):
        raise DamagedFileError(f"{path}: damaged {kind} header") from None
    if not sep or len(payload) != size:
        raise DamagedFileError(f"{path}: truncated ({len(payload)} of {size} payload bytes)")
    if hashlib.sha256(payload).hexdigest() != digest:
        raise DamagedFileError(f"{path}: checksum mismatch, the file is damaged")
    return header, payload


def load_model(path: str | os.PathLike, game: Game | None = None
               ) -> tuple[PolicyValueNet, Game, dict[str, Any]]:
    """Load a model file; with ``game``, insist that the file was made for it."""
    path = Path(path)
    header, payload = _read_model(path)
    if game is not None and header["game"] != game.name:
        raise ValueError(f"{path}: model is for {header['game']!r}, not {game.name!r}")
    game = game or make_game(header["game"])
    kind = header["net"].get("kind", "resnet")  # a file without a kind holds a resnet (made before kinds)
    if kind not in NET_KINDS:
        raise DamagedFileError(f"{path}: a network of kind {kind!r}, which this version does not know "
                               f"(it knows {', '.join(NET_KINDS)})")
    try:
        config = NetConfig(**header["net"])
    except TypeError:  # a key of an option that left the code
        gone = sorted(set(header["net"]) - set(NetConfig.__dataclass_fields__))
        where = ", ".join(f"{k} at commit {REMOVED_NET_KEYS.get(k, 'cdcab39')}" for k in gone)
        raise DamagedFileError(f"{path}: made with network options this version no longer has "
                               f"({', '.join(gone)}); the code that reads it: {where}") from None
    except ValueError as exc:
        raise DamagedFileError(f"{path}: damaged network shape ({exc})") from None
    net = PolicyValueNet.for_game(game, config)
    state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        raise DamagedFileError(f"{path}: weights do not fit the recorded net shape ({exc})") from None
    return net, game, header.get("meta", {})


class ShippedFile:
    """A file's bytes, travelling inside a task to a machine that may not have
    the file (a Ray node with its own disk). ``local_path()`` writes them once
    per machine, under the system temp folder, named by their checksum."""

    def __init__(self, path: str | os.PathLike, data: bytes | None = None) -> None:
        self.name = str(path)
        self.data = Path(path).read_bytes() if data is None else data
        self.sha256 = hashlib.sha256(self.data).hexdigest()

    def __repr__(self) -> str:
        return f"ShippedFile({self.name!r}, sha256={self.sha256[:12]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShippedFile) and other.sha256 == self.sha256

    def __hash__(self) -> int:
        return hash(self.sha256)

    def local_path(self) -> str:
        target = Path(tempfile.gettempdir()) / "zeroloop-shipped" / f"{self.sha256}{Path(self.name).suffix}"
        if not target.is_file() or file_sha256(target) != self.sha256:
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(target, self.data)
        return str(target)


def read_checked_model(path: str | os.PathLike) -> bytes:
    """Model file ``path``'s bytes, read once and verified (magic, header,
    checksum): a damaged file raises here, naming ``path``."""
    raw = _read_bytes(Path(path), "model")
    _parse_checked(raw, Path(path), MODEL_MAGIC, "model")
    return raw


def local_file(f: str | ShippedFile | None) -> str | None:
    """A path on this machine for a path or a shipped file."""
    return f.local_path() if isinstance(f, ShippedFile) else f


def load_or_init_net(game: Game, model: str | ShippedFile | None, seed: int,
                     net_config: NetConfig | None = None) -> tuple[PolicyValueNet, Game]:
    """The model file's net, or, without one, a randomly initialised net
    (seeded with ``seed``) of the default shape."""
    model = local_file(model)
    if model:
        net, game, _ = load_model(model, game)
        return net, game
    torch.manual_seed(seed)
    return PolicyValueNet.for_game(game, net_config or NetConfig()), game


SHARD_MAGIC = b"ZEROLOOP-SHARD 1\n"


def save_shard(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write named arrays (a compressed-npz payload) with a JSON header that
    holds ``meta`` and the payload's length and SHA-256."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    payload = buf.getvalue()
    header = {"payload_bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest(), "meta": meta}
    atomic_write_bytes(path, SHARD_MAGIC + json.dumps(header).encode() + b"\n" + payload)


def read_shard_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The shard's metadata, after checking the whole file (raises DamagedFileError)."""
    return _read_checked(Path(path), SHARD_MAGIC, "shard")[0]["meta"]


def load_shard(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    path = Path(path)
    header, payload = _read_checked(path, SHARD_MAGIC, "shard")
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (ValueError, OSError) as exc:
        raise DamagedFileError(f"{path}: unreadable shard payload ({exc})") from None
    return arrays, header["meta"]


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
