"""Othello (Reversi) on a 6x6 or 8x8 board.

Notation is the usual one: a column letter and a row number counted from the
top (``d3``; a game is ``"f5d6c3"`` or ``"f5 d6 c3"``), and ``pass`` for the
forced pass, the last action (index ``rows * cols``). A pass is legal only
when the side to move has no other move; the game ends when neither side can
move and the side with more discs wins. Black (X) moves first.
"""

from __future__ import annotations

import re

import numpy as np

from zeroloop.engine.games.base import IllegalMoveError, State
from zeroloop.engine.games.bitboard import BitboardGame
from zeroloop.engine.games.text import TokenNotation

_TOKEN = re.compile(r"\s*(pass|[a-zA-Z]\d+)", re.IGNORECASE)


class Othello(TokenNotation, BitboardGame):
    _token = _TOKEN

    def __init__(self, size: int = 8) -> None:
        if size not in (6, 8):
            raise ValueError(f"othello size {size}: must be 6 or 8")
        self.rows = self.cols = size
        self.name = f"othello-{size}x{size}"
        self.pass_action = size * size
        self.num_actions = size * size + 1
        # every move fills a cell; two passes in a row end the game
        self.max_moves = 2 * (size * size - 4) + 1
        self.stride = size + 1
        self._setup_bits()
        s = self.stride
        self._dirs = (1, -1, s, -s, s + 1, s - 1, -s + 1, -s - 1)
        m = size // 2
        cell = lambda r, c: self.cell_bits[r * size + c]  # noqa: E731
        # black (first player) on d5 and e4, white on d4 and e5 (8x8 names)
        self._start = State(cell(m, m - 1) | cell(m - 1, m), cell(m - 1, m - 1) | cell(m, m))

    def initial_state(self) -> State:
        return self._start

    def _shift(self, x: int, d: int) -> int:
        return ((x << d) if d > 0 else (x >> -d)) & self.board_bits

    def moves_bits(self, me: int, opp: int) -> int:
        """Bitboard of the cells where ``me`` may play."""
        empty = self.board_bits & ~(me | opp)
        out = 0
        for d in self._dirs:
            x = self._shift(me, d) & opp
            while x:
                nxt = self._shift(x, d)
                out |= nxt & empty
                x = nxt & opp
        return out

    def legal_mask(self, state: State) -> np.ndarray:
        mask = np.zeros(self.num_actions, dtype=bool)
        if state.outcome is not None:
            return mask
        moves = self.moves_bits(state.me, state.opp)
        if moves:
            mask[: self.pass_action] = self.bits_to_cells([moves])[0].astype(bool)
        else:
            mask[self.pass_action] = True
        return mask

    def _flips(self, me: int, opp: int, bit: int) -> int:
        flips = 0
        for d in self._dirs:
            run, x = 0, self._shift(bit, d)
            while x & opp:
                run |= x
                x = self._shift(x, d)
            if x & me:
                flips |= run
        return flips

    def apply(self, state: State, action: int) -> State:
        self._check_action(state, action)
        me, opp = state.me, state.opp
        if action == self.pass_action:
            if self.moves_bits(me, opp):
                raise IllegalMoveError("pass is only legal when there is no other move")
            new_me, new_opp = opp, me
        else:
            bit = self.cell_bits[action]
            flips = self._flips(me, opp, bit) if not (me | opp) & bit else 0
            if not flips:
                raise IllegalMoveError(f"{self.format_action(action)} flips nothing")
            new_me, new_opp = opp & ~flips, me | bit | flips
        ply = state.ply + 1
        outcome = None
        if not self.moves_bits(new_me, new_opp) and not self.moves_bits(new_opp, new_me):
            diff = new_me.bit_count() - new_opp.bit_count()
            outcome = float(np.sign(diff))
        return State(new_me, new_opp, ply, action, outcome)

    def symmetries(self):
        return self._dihedral(["identity", "flip_lr", "flip_ud", "rot180",
                               "transpose", "rot90", "rot270", "anti_transpose"])

    def _row_label(self, r: int) -> str:
        return str(r + 1)

    def format_action(self, action: int) -> str:
        if action == self.pass_action:
            return "pass"
        r, c = divmod(action, self.cols)
        return f"{self._col_label(c)}{r + 1}"

    def parse_action(self, text: str) -> int:
        t = text.strip().lower()
        if t == "pass":
            return self.pass_action
        m = re.fullmatch(r"([a-z])(\d+)", t)
        if not m:
            raise IllegalMoveError(f"{text!r} is not a cell like 'd3' or 'pass'")
        c, r = ord(m.group(1)) - ord("a"), int(m.group(2)) - 1
        if not (0 <= c < self.cols and 0 <= r < self.rows):
            raise IllegalMoveError(f"{text!r} is off the {self.rows}x{self.cols} board")
        return r * self.cols + c

    def render(self, state: State) -> str:
        text = super().render(state)
        occ = self.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        return f"{text}\ndiscs X {int(first.sum())} - O {int(second.sum())}"
