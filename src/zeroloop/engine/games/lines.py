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
        # has_line's shifts, unrolled: the doubling steps of each direction
        steps, run = [], 1
        while run < self.k:
            steps.append(min(run, self.k - run))
            run += steps[-1]
        self._line_shifts = tuple(tuple(st * d for st in steps) for d in self._directions)

    def has_line(self, board: int) -> bool:
        """True when ``board`` holds ``k`` stones in a row."""
        for shifts in self._line_shifts:
            x = board
            for sh in shifts:
                x &= x >> sh
            if x:
                return True
        return False

    def random_playout(self, state: State, rng: np.random.Generator) -> float:
        """The result, from ``state``'s mover, of finishing the game with uniformly
        random moves: the same game, draw for draw of ``rng``, as applying
        ``rng.integers(number of legal moves)``-th legal move (in action order)
        until the end, without building a state per move."""
        if state.outcome is not None:
            return state.outcome
        me, opp = state.me, state.opp
        moves, bits = self._playout_moves(me | opp)
        integers, has_line = rng.integers, self.has_line
        sign = 1.0  # +1 while the mover of `state` is the side to move
        while True:
            i = int(integers(len(moves)))
            me |= self._playout_take(moves, bits, i)
            if has_line(me):
                return sign  # the side that just moved has won
            if not moves:
                return 0.0
            me, opp = opp, me
            sign = -sign

    def _playout_moves(self, full: int) -> tuple[list[int], list[int]]:
        """The legal moves of a running game with stones ``full``, in action order,
        and what a playout needs to play them (here: each empty cell's bit)."""
        bits = [b for b in self.cell_bits if not full & b]
        return bits, bits

    def _playout_take(self, moves: list[int], bits: list[int], i: int) -> int:
        """Play the ``i``-th legal move: its stone's bit; keeps ``moves`` the legal
        moves afterwards, in action order."""
        return moves.pop(i)

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
