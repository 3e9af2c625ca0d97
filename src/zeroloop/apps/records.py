"""Recorded games for the viewer: self-play games (``data/gen_g/`` shards,
with the search's value and visit shares at every move) and gate games
(``reports/generations/gen_g/gate_games.json``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from zeroloop.apps.play import PlayError, board_view, move_cell
from zeroloop.engine.games import make_game
from zeroloop.pipeline.data.shards import read_manifest
from zeroloop.pipeline.data.storage import DamagedFileError, load_shard, read_shard_meta


def _generations(base: Path) -> list[tuple[int, Path]]:
    out = []
    for d in base.glob("gen_*"):
        if m := re.fullmatch(r"gen_(\d+)", d.name):
            out.append((int(m.group(1)), d))
    return sorted(out)


def _selfplay_shards(d: Path, strict: bool = False) -> list[Path]:
    """The shards a generation's manifest lists, always inside ``d``: the
    manifest must name exactly its job's ``shard_NNNNN.zls`` files. A missing
    or malformed manifest gives [] (``strict``: the error naming it)."""
    try:
        names = sorted(read_manifest(d / "manifest.json")["shards"])
    except (FileNotFoundError, DamagedFileError):
        if strict:
            raise
        return []
    return [d / n for n in names]


def list_records(root: str | Path = ".", game: str | None = None) -> list[dict[str, Any]]:
    """Every recorded set of games under ``root`` (optionally of one game)."""
    root = Path(root)
    out = []
    for g, d in _generations(root / "data"):
        shards = _selfplay_shards(d)
        if not shards:
            continue
        try:
            meta = json.loads((d / "manifest.json").read_text())
            count = int(meta["identity"]["games"])  # the manifest is written once every shard is in
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if game is None or meta.get("game") == game:
            out.append({"id": f"selfplay-{g}", "kind": "selfplay", "generation": g, "game": meta.get("game"),
                        "games": count, "label": f"self-play, generation {g} ({count} games)"})
    for g, d in _generations(root / "reports" / "generations"):
        path = d / "gate_games.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if game is None or data.get("game") == game:
            n = len(data.get("games", []))
            out.append({"id": f"gate-{g}", "kind": "gate", "generation": g, "game": data.get("game"),
                        "games": n, "label": f"gate, generation {g}: {data.get('a')} vs {data.get('b')} "
                                            f"({n} games)"})
    return out


def load_record(root: str | Path, record_id: str, index: int) -> dict[str, Any]:
    """Game ``index`` of a record set, frame by frame: the board before each
    move and after the last, with the move played and (self-play) the
    search's value for the side to move and its visit shares. A damaged or
    malformed record file is a :class:`PlayError` naming it."""
    try:
        return _load_record(Path(root), record_id, index)
    except DamagedFileError as exc:
        raise PlayError(str(exc), 422) from None
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PlayError):
            raise
        raise PlayError(f"record {record_id!r} is malformed: {type(exc).__name__}: {exc}", 422) from None


def _load_record(root: Path, record_id: str, index: int) -> dict[str, Any]:
    m = re.fullmatch(r"(selfplay|gate)-(\d+)", record_id)
    if not m:
        raise PlayError(f"unknown record {record_id!r} (expected selfplay-G or gate-G)", 404)
    kind, gen = m.group(1), int(m.group(2))
    values: list[float | None]
    shares: list[list[float] | None]
    if kind == "selfplay":
        d = root / "data" / f"gen_{gen}"
        if not (d / "manifest.json").exists():
            raise PlayError(f"no self-play games for generation {gen} in {d}", 404)
        shards = _selfplay_shards(d, strict=True)
        game_name = json.loads((d / "manifest.json").read_text())["game"]
        from zeroloop.engine.selfplay import arrays_to_records

        counts = [int(read_shard_meta(s).get("games", 0)) for s in shards]
        count = sum(counts)
        if not 0 <= index < count:
            raise PlayError(f"game index {index} is out of range 0..{count - 1}", 404)
        shard = int(np.searchsorted(np.cumsum(counts), index, side="right"))
        arrays, _ = load_shard(shards[shard])
        found = arrays_to_records(arrays)[index - sum(counts[:shard])]
        actions = [int(a) for a in found.actions]
        values = [float(v) for v in found.values]
        shares = [p.tolist() for p in found.policies]
        players = ["self-play", "self-play"]
    else:
        path = root / "reports" / "generations" / f"gen_{gen}" / "gate_games.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            raise PlayError(f"no gate games for generation {gen} ({path})", 404) from None
        count = len(data["games"])
        if not 0 <= index < count:
            raise PlayError(f"game index {index} is out of range 0..{count - 1}", 404)
        game_name = data["game"]
        rec = data["games"][index]
        game = make_game(game_name)
        actions = game.parse_moves(rec["moves"])
        a, b = data["a"], data["b"]
        players = [a, b] if rec["a_first"] else [b, a]
        values = [None] * len(actions)
        shares = [None] * len(actions)
    game = make_game(game_name)
    frames, state = [], game.initial_state()
    for i, act in enumerate(actions + [None]):
        view = board_view(game, state)
        frame = {"cells": view["cells"], "last": view["last"], "to_move": view["to_move"],
                 "result": view["result"]}
        if act is not None:
            frame["move"] = game.format_action(act)
            frame["value"] = None if values[i] is None else round(values[i], 3)
            if shares[i] is not None:
                p = np.asarray(shares[i])
                top = [int(a) for a in np.flatnonzero(p > 0.005)]
                frame["shares"] = {game.format_action(a): round(float(p[a]), 3) for a in top}
                cells = {move_cell(game, state, a): round(float(p[a]), 3) for a in top}
                frame["share_cells"] = {str(c): v for c, v in cells.items() if c is not None}
            state = game.apply(state, act)
        frames.append(frame)
    return {"record": record_id, "index": index, "count": count, "game": game_name, "rows": game.rows,
            "cols": game.cols, "players": {"X": players[0], "O": players[1]},
            "result": game.describe_outcome(state), "moves": [game.format_action(a) for a in actions],
            "frames": frames}
