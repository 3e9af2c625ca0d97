"""Connect Four, 6 rows x 7 columns. An action is a column; the notation is
the digit 1-7 (left to right), as the Pons solver and its benchmark files use,
so a game is a digit string such as ``"4453"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zeroloop.engine.games import connect4_kernels as kernels
from zeroloop.engine.games.base import IllegalMoveError, Rows, State, Symmetry
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
        self._bottom_bits = [self.cell_bits[cells[0]] for cells in self._column_cells]
        # row 0 is bits 0..6: a board's full columns are `full & 127`, and the legal mask a row of
        # this table (row 128: a finished game, no move)
        assert self._top_bits == [1 << c for c in range(self.cols)]
        assert self.stride == 8 and self._line_shifts == ((1, 2), (8, 16), (9, 18), (7, 14))  # apply's
        # the row kernels' own copy of this layout (numba reads module constants)
        assert kernels.COLUMN.tolist() == self._column_mask and kernels.BOTTOM.tolist() == self._bottom_bits
        assert kernels.BOARD == self.board_bits and kernels.CELL_BIT.tolist() == self.bit_of_cell.tolist()
        top = np.arange(1 << self.cols)[:, None] >> np.arange(self.cols) & 1
        self._legal_table = np.concatenate([top == 0, np.zeros((1, self.cols), bool)])
        self._legal_table.flags.writeable = False

    def initial_state(self) -> State:
        return State(0, 0)

    def height(self, state: State, col: int) -> int:
        return ((state.me | state.opp) & self._column_mask[col]).bit_count()

    def legal_mask(self, state: State) -> np.ndarray:
        if state.outcome is not None:
            return np.zeros(7, dtype=bool)
        return self._legal_table[(state.me | state.opp) & 127].copy()

    def legal_masks(self, states: Sequence[State]) -> np.ndarray:
        """``[B, A]``: ``legal_mask`` of each state, in one table lookup."""
        return self._legal_table[[128 if s.outcome is not None else (s.me | s.opp) & 127 for s in states]]

    def apply(self, state: State, action: int) -> State:
        # KInARowGame._place with has_line unrolled for k = 4 (shifts 1 and 2 of each direction);
        # the search's hot loop: one call per leaf
        if state.outcome is not None or not 0 <= action < 7:
            self._check_action(state, action)
        me, opp = state.me, state.opp
        full = me | opp
        if full & self._top_bits[action]:
            raise IllegalMoveError(f"column {action + 1} is full")
        stones = full & self._column_mask[action]
        # the column's top stone is its lowest bit; the free cell is the one above it (a row up)
        me |= (stones & -stones) >> 8 if stones else self._bottom_bits[action]
        x = me & (me >> 1)
        if x & (x >> 2):
            outcome: float | None = -1.0  # the player now to move has lost
        else:
            x = me & (me >> 8)
            if x & (x >> 16):
                outcome = -1.0
            else:
                x = me & (me >> 9)
                if x & (x >> 18):
                    outcome = -1.0
                else:
                    x = me & (me >> 7)
                    if x & (x >> 14):
                        outcome = -1.0
                    elif (me | opp) == self.board_bits:
                        outcome = 0.0
                    else:
                        outcome = None
        return State(opp, me, state.ply + 1, action, outcome)

    # -- positions as rows of arrays (a search step's leaves at once: connect4_kernels) ----------
    def apply_rows(self, pos: Rows, parents: np.ndarray, actions: np.ndarray, leaves: np.ndarray
                   ) -> np.ndarray:
        """Play ``actions[i]`` (legal) in row ``parents[i]`` of ``pos`` into row
        ``leaves[i]``; ``[n]`` float32 outcomes from the new side to move, NaN
        while a game runs (:meth:`apply` of each)."""
        outcome = np.empty(len(parents), np.float32)
        kernels.apply_rows(*pos, parents, actions, leaves, outcome)
        return outcome

    def legal_rows(self, pos: Rows, rows: np.ndarray) -> np.ndarray:
        """``[n, 7]``: :meth:`legal_mask` of rows ``rows`` (running games)."""
        out = np.empty((len(rows), 7), np.bool_)
        kernels.legal_rows(pos.me, pos.opp, rows, out)
        return out

    def encode_rows(self, pos: Rows, rows: np.ndarray, pad_to: int = 0) -> np.ndarray:
        """:meth:`encode` of rows ``rows``, padded to ``pad_to`` rows with
        copies of the last (:func:`~zeroloop.engine.nn.inference.encode_padded`)."""
        out = np.empty((max(len(rows), pad_to), 4, 6, 7), np.float32)
        kernels.encode_rows(*pos, rows, out)
        return out

    def uct_visits(self, state: State, playouts: int, c: float, rng: np.random.Generator
                   ) -> dict[int, int]:
        """Rollout UCT's visits per move from ``state`` (a running game), as
        ``generic_uct_search`` counts them, with the same draws of ``rng``, in
        a numba kernel (:func:`~zeroloop.engine.games.connect4_kernels.uct_visits`)."""
        actions, visits = np.empty(7, np.int64), np.empty(7, np.int64)
        k = kernels.uct_visits(state.me, state.opp, playouts, float(c), rng, actions, visits)
        return dict(zip(actions[:k].tolist(), visits[:k].tolist(), strict=True))

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

    def _plane_words(self, states: Sequence[State]) -> list[int]:
        # the last move's stone is the top one of its column: the column's lowest bit (last_cell's cell)
        words, column_mask, every = [], self._column_mask, self.board_bits
        for s in states:
            me, opp, last = s.me, s.opp, s.last
            if last >= 0:
                stones = (me | opp) & column_mask[last]
                words += (me, opp, stones & -stones, 0 if s.ply & 1 else every)
            else:
                words += (me, opp, 0, 0 if s.ply & 1 else every)
        return words

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
