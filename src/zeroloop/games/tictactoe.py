"""Tic-tac-toe: the 3,3,3-game. Cells are digits 1-9, row by row from the
top-left, so a game is a digit string such as ``"5193"``."""

from __future__ import annotations

from collections.abc import Sequence

from zeroloop.games.base import IllegalMoveError, State
from zeroloop.games.lines import PlacementGame


class TicTacToe(PlacementGame):
    name = "tictactoe"
    rows = cols = k = 3
    num_actions = 9
    max_moves = 9

    def __init__(self) -> None:
        self._setup_lines()

    def format_action(self, action: int) -> str:
        return str(action + 1)

    def parse_action(self, text: str) -> int:
        t = text.strip()
        if len(t) != 1 or t not in "123456789":
            raise IllegalMoveError(f"{text!r} is not a cell 1-9")
        return int(t) - 1

    def format_moves(self, actions: Sequence[int]) -> str:
        return "".join(self.format_action(a) for a in actions)

    def parse_moves(self, text: str) -> list[int]:
        return [self.parse_action(ch) for ch in text if not ch.isspace()]

    def render(self, state: State) -> str:
        occ = self.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        rows = []
        for r in range(3):
            cells = []
            for c in range(3):
                i = 3 * r + c
                cells.append("X" if first[i] else "O" if second[i] else str(i + 1))
            rows.append(" " + " | ".join(cells))
        board = "\n---+---+---\n".join(rows)
        status = self.describe_outcome(state) if state.outcome is not None else (
            f"{'X' if state.ply % 2 == 0 else 'O'} to move")
        return f"{board}\n{status}"
