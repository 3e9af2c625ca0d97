"""Connect Four, 6 rows x 7 columns. An action is a column; the notation is
the digit 1-7 (left to right), as the Pons solver and its benchmark files use,
so a game is a digit string such as ``"4453"``.
"""

from __future__ import annotations

import numpy as np

from zeroloop.engine.games.base import IllegalMoveError, State, Symmetry
from zeroloop.engine.games.lines import KInARowGame
from zeroloop.engine.games.text import DigitNotation


class ConnectFour(DigitNotation, KInARowGame):
    name = "connect4"
    digit_noun = "column"
    rows, cols, k = 6, 7, 4
    num_actions = 7
    max_moves = 42

    def __init__(self) -> None:
        self._setup_lines()
        # column c's cells from the bottom row up
        self._column_cells = [
            [(self.rows - 1 - h) * self.cols + c for h in range(self.rows)]
            for c in range(self.cols)
        ]
        self._column_mask = [
            sum(self.cell_bits[i] for i in cells) for cells in self._column_cells
        ]
        self._top_bits = [self.cell_bits[c] for c in range(self.cols)]  # row 0

    def initial_state(self) -> State:
        return State(0, 0)

    def height(self, state: State, col: int) -> int:
        return ((state.me | state.opp) & self._column_mask[col]).bit_count()

    def legal_mask(self, state: State) -> np.ndarray:
        if state.outcome is not None:
            return np.zeros(7, dtype=bool)
        full = state.me | state.opp
        return np.array([not (full & t) for t in self._top_bits], dtype=bool)

    def apply(self, state: State, action: int) -> State:
        self._check_action(state, action)
        h = self.height(state, action)
        if h == self.rows:
            raise IllegalMoveError(f"column {action + 1} is full")
        bit = self.cell_bits[self._column_cells[action][h]]
        return self._place(state, action, bit)

    def _playout_moves(self, full: int) -> tuple[list[int], list[int]]:
        """Open columns in order, and the next free cell's bit of each column."""
        cols = [c for c in range(self.cols) if not full & self._top_bits[c]]
        nxt = [self.cell_bits[self._column_cells[c][(full & self._column_mask[c]).bit_count()]]
               if c in cols else 0 for c in range(self.cols)]
        return cols, nxt

    def _playout_take(self, moves: list[int], bits: list[int], i: int) -> int:
        c = moves[i]
        bit = bits[c]
        if bit == self._top_bits[c]:
            moves.pop(i)  # the column is full now
        else:
            bits[c] = bit >> self.stride  # the cell above (row r - 1)
        return bit

    def last_cell(self, state: State) -> int:
        if state.last < 0:
            return -1
        return self._column_cells[state.last][self.height(state, state.last) - 1]

    def symmetries(self):
        ident = np.arange(42)
        mirror = np.arange(42).reshape(6, 7)[:, ::-1].reshape(-1)
        return [
            Symmetry("identity", ident, np.arange(7)),
            Symmetry("flip_lr", mirror, np.arange(7)[::-1].copy()),
        ]

    def _col_label(self, c: int) -> str:
        return str(c + 1)

    def _row_label(self, r: int) -> str:
        return ""
