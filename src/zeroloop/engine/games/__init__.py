"""Games and the name registry: ``make_game("connect4")``, ``make_game("gomoku-8x8-5")``."""

from __future__ import annotations

import re

from zeroloop.engine.games.base import (
    Game,
    IllegalMoveError,
    State,
    Symmetry,
    first_player_result,
    random_line,
)
from zeroloop.engine.games.connect4 import ConnectFour
from zeroloop.engine.games.gomoku import Gomoku
from zeroloop.engine.games.othello import Othello
from zeroloop.engine.games.tictactoe import TicTacToe

__all__ = [
    "GAME_NAMES", "ConnectFour", "Game", "Gomoku", "IllegalMoveError", "Othello",
    "State", "Symmetry", "TicTacToe", "first_player_result", "make_game", "random_line",
]

#: Names accepted by :func:`make_game`, with what each means.
GAME_NAMES = {
    "tictactoe": "tic-tac-toe (3x3)",
    "connect4": "Connect Four (6x7, columns 1-7)",
    "gomoku": "gomoku 6x6, four in a row (same as gomoku-6x6-4)",
    "gomoku-RxC-K": "m,n,k-game: R rows, C columns, K in a row, e.g. gomoku-8x8-5",
    "othello": "Othello 8x8 (same as othello-8x8)",
    "othello-6x6": "Othello 6x6",
}


def make_game(name: str) -> Game:
    """Build a game from its name; raises ValueError listing the valid names."""
    key = name.strip().lower()
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
    names = ", ".join(GAME_NAMES)
    raise ValueError(f"unknown game {name!r}; choose one of: {names}")
