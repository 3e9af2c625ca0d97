"""k-in-a-row detection on padded bitboards, shared by gomoku, tic-tac-toe and
Connect Four.

Each board row takes ``cols + 1`` bits; the spare bit stays empty, so shifting
a bitboard by a direction never carries a stone from one row's edge into the
next row. A run of k stones in direction d exists when the AND of the board
with itself shifted by 0, d, ..., (k-1)d is non-zero; doubling the run length
at each step needs about log2(k) shifts per direction.
"""

from __future__ import annotations

import numpy as np

from zeroloop.engine.games.base import IllegalMoveError, State
from zeroloop.engine.games.bitboard import BitboardGame


class KInARowGame(BitboardGame):
    """Stones are placed on empty cells; k in a row (any direction) wins."""

    k: int

    def _setup_lines(self) -> None:
        self.stride = self.cols + 1
        self._setup_bits()
        s = self.stride
        self._directions = (1, s, s + 1, s - 1)  # horizontal, vertical, two diagonals

    def has_line(self, board: int) -> bool:
        """True when ``board`` holds ``k`` stones in a row."""
        k = self.k
        for d in self._directions:
            x, run = board, 1
            while run < k and x:
                step = min(run, k - run)
                x &= x >> (step * d)
                run += step
            if x:
                return True
        return False

    def _place(self, state: State, action: int, bit: int) -> State:
        """Put the mover's stone on ``bit``; the result is from the next mover."""
        me = state.me | bit
        ply = state.ply + 1
        if self.has_line(me):
            outcome: float | None = -1.0  # the player now to move has lost
        elif (me | state.opp) == self.board_bits:
            outcome = 0.0
        else:
            outcome = None
        return State(state.opp, me, ply, action, outcome)


class PlacementGame(KInARowGame):
    """Free placement on any empty cell (gomoku, tic-tac-toe): action = cell."""

    def initial_state(self) -> State:
        return State(0, 0)

    def legal_mask(self, state: State) -> np.ndarray:
        if state.outcome is not None:
            return np.zeros(self.num_actions, dtype=bool)
        return self.bits_to_cells([state.me | state.opp])[0] == 0

    def apply(self, state: State, action: int) -> State:
        self._check_action(state, action)
        bit = self.cell_bits[action]
        if (state.me | state.opp) & bit:
            raise IllegalMoveError(f"{self.format_action(action)} is already occupied")
        return self._place(state, action, bit)

    def symmetries(self):
        if self.rows == self.cols:
            names = ["identity", "flip_lr", "flip_ud", "rot180",
                     "transpose", "rot90", "rot270", "anti_transpose"]
        else:
            names = ["identity", "flip_lr", "flip_ud", "rot180"]
        return self._dihedral(names)
