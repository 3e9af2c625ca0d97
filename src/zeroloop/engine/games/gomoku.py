"""Gomoku as the m,n,k-game: ``rows`` x ``cols`` board, ``k`` in a row wins
(an overline counts). Moves are written as a column letter and a row number
counted from the bottom, like Go diagrams: ``a1`` is the bottom-left cell.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from zeroloop.engine.games.base import IllegalMoveError
from zeroloop.engine.games.lines import PlacementGame

_TOKEN = re.compile(r"\s*([a-zA-Z])(\d+)")


class Gomoku(PlacementGame):
    def __init__(self, rows: int = 6, cols: int = 6, k: int = 4) -> None:
        if not (3 <= rows <= 19 and 3 <= cols <= 19):
            raise ValueError(f"gomoku board {rows}x{cols}: rows and cols must be in 3..19")
        if not 3 <= k <= max(rows, cols):
            raise ValueError(f"gomoku k={k}: must be in 3..{max(rows, cols)}")
        self.rows, self.cols, self.k = rows, cols, k
        self.name = f"gomoku-{rows}x{cols}-{k}"
        self.num_actions = rows * cols
        self.max_moves = rows * cols
        self._setup_lines()

    def format_action(self, action: int) -> str:
        r, c = divmod(action, self.cols)
        return f"{self._col_label(c)}{self.rows - r}"

    def parse_action(self, text: str) -> int:
        m = re.fullmatch(r"([a-zA-Z])(\d+)", text.strip())
        if not m:
            raise IllegalMoveError(f"{text!r} is not a cell like 'c3'")
        c = ord(m.group(1).lower()) - ord("a")
        row = int(m.group(2))
        if not (0 <= c < self.cols and 1 <= row <= self.rows):
            raise IllegalMoveError(
                f"{text!r} is off the {self.rows}x{self.cols} board "
                f"(a..{self._col_label(self.cols - 1)}, 1..{self.rows})"
            )
        return (self.rows - row) * self.cols + c

    def format_moves(self, actions: Sequence[int]) -> str:
        return " ".join(self.format_action(a) for a in actions)

    def parse_moves(self, text: str) -> list[int]:
        return [self.parse_action(t) for t in _split_cells(text)]


def _split_cells(text: str) -> list[str]:
    """Split ``'c3 d4'`` or ``'c3d4'`` into cell tokens; reject leftovers."""
    tokens, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            bad = text[pos:].split()[0] if text[pos:].split() else text[pos:]
            raise IllegalMoveError(f"cannot read a move at {bad!r}")
        tokens.append(m.group(1) + m.group(2))
        pos = m.end()
        while pos < len(text) and text[pos] in " ,\t":
            pos += 1
    return tokens
