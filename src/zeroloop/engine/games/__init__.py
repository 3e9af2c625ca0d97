"""Games and the name registry: ``make_game("connect4")``, ``make_game("gomoku-8x8-5")``."""

from __future__ import annotations

import re
from collections.abc import Callable

from zeroloop.engine.games.base import (
    Game,
    IllegalMoveError,
    State,
    Symmetry,
    first_player_result,
    random_line,
)
from zeroloop.engine.games.check import GameCheckError, GameReport, check_game
from zeroloop.engine.games.connect4 import ConnectFour
from zeroloop.engine.games.go import Go, GoState
from zeroloop.engine.games.gomoku import Gomoku
from zeroloop.engine.games.othello import Othello
from zeroloop.engine.games.tictactoe import TicTacToe

__all__ = [
    "ENTRY_POINT_GROUP", "GAME_NAMES", "ConnectFour", "Game", "GameCheckError", "GameReport", "Go", "GoState",
    "Gomoku",
    "IllegalMoveError", "Othello", "State", "Symmetry", "TicTacToe", "check_game", "first_player_result",
    "make_game", "random_line", "register_game", "unregister_game",
]

#: Names accepted by :func:`make_game`, with what each means.
GAME_NAMES = {
    "tictactoe": "tic-tac-toe (3x3)",
    "connect4": "Connect Four (6x7, columns 1-7)",
    "gomoku": "gomoku 6x6, four in a row (same as gomoku-6x6-4)",
    "gomoku-RxC-K": "m,n,k-game: R rows, C columns, K in a row, e.g. gomoku-8x8-5",
    "othello": "Othello 8x8 (same as othello-8x8)",
    "othello-6x6": "Othello 6x6",
    "go-9": "Go 9x9, Tromp-Taylor rules, komi 7.5 (go-7: 7x7, komi 9; go-N or go-NxN: N x N)",
    "go-N-komiK": "Go N x N with komi K, e.g. go-9-komi6.5",
}


#: The entry-point group a package lists its games in, ``name = "module:factory"``,
#: so that every process (DVC stages, spawned workers) finds them by name.
ENTRY_POINT_GROUP = "zeroloop.games"

_registered: dict[str, Callable[[], Game]] = {}


def register_game(name: str, factory: Callable[[], Game], *, description: str = "") -> None:
    """Make ``make_game(name)``, and so params.yaml's ``game: name``, build ``factory()``.

    ``name`` is lowercase and is the ``name`` of the game built: the pipeline
    stores ``game.name`` and rebuilds games from it. A registration lasts as long
    as this process; DVC stages and worker processes find a game through an entry
    point of group :data:`ENTRY_POINT_GROUP` instead (docs/adding-a-game.md).
    """
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", name):
        raise ValueError(f"game name {name!r}: use lowercase letters, digits, '.', '_' and '-'")
    if name in _registered or _builtin(name) is not None:
        raise ValueError(f"game name {name!r} is taken")
    built = factory()
    if not isinstance(built, Game) or built.name != name:
        raise ValueError(f"register_game({name!r}): the factory built {built!r} named "
                         f"{getattr(built, 'name', None)!r}; it must build a Game named {name!r}")
    _registered[name] = factory
    GAME_NAMES[name] = description or "registered with register_game"


def unregister_game(name: str) -> None:
    """Undo :func:`register_game` (KeyError for a name that is not registered)."""
    del _registered[name]
    GAME_NAMES.pop(name, None)


def make_game(name: str) -> Game:
    """Build a game from its name; raises ValueError listing the valid names."""
    key = name.strip().lower()
    if (game := _builtin(key)) is not None:
        return game
    factory = _registered.get(key) or _entry_point(key)
    if factory is None:
        names = ", ".join([*GAME_NAMES, *_entry_point_names()])
        raise ValueError(f"unknown game {name!r}; choose one of: {names}")
    game = factory()
    if game.name != key:
        raise ValueError(f"the factory of game {key!r} built a game named {game.name!r}: a game must "
                         f"be registered under its own name")
    return game


def _builtin(key: str) -> Game | None:
    if key in ("tictactoe", "tic-tac-toe"):
        return TicTacToe()
    if key in ("connect4", "connect-four", "connectfour"):
        return ConnectFour()
    if key == "gomoku":
        return Gomoku()
    if m := re.fullmatch(r"gomoku-(\d+)x(\d+)-(\d+)", key):
        return Gomoku(*(int(g) for g in m.groups()))
    if key in ("othello", "othello-8x8"):
        return Othello(8)
    if key == "othello-6x6":
        return Othello(6)
    if m := re.fullmatch(r"go-(\d+)(?:x(\d+))?(?:-komi(-?\d+(?:\.\d+)?))?", key):
        if m.group(2) is not None and m.group(2) != m.group(1):
            raise ValueError(f"{name_hint(key)}: Go boards here are square")
        size = int(m.group(1))
        komi = float(m.group(3)) if m.group(3) is not None else None
        return Go(size, komi)
    return None


def name_hint(key: str) -> str:
    return f"game {key!r}"


def _entry_point(key: str) -> Callable[[], Game] | None:
    from importlib.metadata import entry_points  # only for a name nothing else knows

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == key:
            return ep.load()
    return None


def _entry_point_names() -> list[str]:
    from importlib.metadata import entry_points

    return sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} - set(GAME_NAMES))
