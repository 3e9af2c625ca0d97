"""Tic-tac-toe: the 3,3,3-game. Cells are digits 1-9, row by row from the
top-left, so a game is a digit string such as ``"5193"``."""

from __future__ import annotations

from zeroloop.engine.games.base import State
from zeroloop.engine.games.lines import PlacementGame
from zeroloop.engine.games.text import DigitNotation


class TicTacToe(DigitNotation, PlacementGame):
    name = "tictactoe"
    digit_noun = "cell"
    rows = cols = k = 3
    num_actions = 9
    max_moves = 9

    def __init__(self) -> None:
        self._setup_lines()

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
