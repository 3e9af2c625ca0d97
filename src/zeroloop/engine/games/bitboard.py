"""The bitboard machinery the board games share: cell bits, input planes,
symmetries and move checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zeroloop.engine.games.base import NUM_PLANES, IllegalMoveError, State, Symmetry
from zeroloop.engine.games.text import BoardText


class BitboardGame(BoardText):
    """Shared code for games whose stones live in Python-int bitboards.

    A subclass sets ``rows``, ``cols``, ``num_actions``, ``max_moves``,
    ``name``, ``stride`` (bits per board row, at least ``cols``) and implements
    ``legal_mask``, ``apply``, the notation and ``symmetries``. Cell ``(r, c)``
    (r = 0 on top) lives at bit ``r * stride + c`` unless ``bit_of_cell`` is
    overridden.
    """

    name: str
    rows: int
    cols: int
    num_actions: int
    max_moves: int
    stride: int

    def _setup_bits(self) -> None:
        r, c = np.divmod(np.arange(self.rows * self.cols), self.cols)
        self.bit_of_cell = self._bit_index(r, c).astype(np.int64)  # [H*W]
        self._nbytes = (int(self.bit_of_cell.max()) + 8) // 8
        self.cell_bits = [1 << int(b) for b in self.bit_of_cell]
        self.board_bits = sum(self.cell_bits)

    def _bit_index(self, r: np.ndarray, c: np.ndarray) -> np.ndarray:
        return r * self.stride + c

    # -- planes ---------------------------------------------------------
    def bits_to_cells(self, boards: Sequence[int]) -> np.ndarray:
        """``[B, H*W]`` uint8 cell occupancy of each bitboard."""
        nb = self._nbytes
        buf = b"".join(x.to_bytes(nb, "little") for x in boards)
        raw = np.frombuffer(buf, dtype=np.uint8).reshape(len(boards), nb)
        bits = np.unpackbits(raw, axis=1, bitorder="little")
        return bits[:, self.bit_of_cell]

    def cells_to_bits(self, cells: np.ndarray) -> int:
        """Inverse of one row of :meth:`bits_to_cells`."""
        out = 0
        for i in np.flatnonzero(cells):
            out |= self.cell_bits[i]
        return out

    def last_cell(self, state: State) -> int:
        """Cell index of the last move, or -1 (none, or a pass)."""
        return state.last if 0 <= state.last < self.rows * self.cols else -1

    def encode(self, states: Sequence[State]) -> np.ndarray:
        if self._nbytes <= 8:  # each plane a 64-bit word: one unpacking for the whole batch
            n = len(states)
            words = np.array(self._plane_words(states), dtype="<u8")
            bits = np.unpackbits(words.view(np.uint8).reshape(NUM_PLANES * n, 8), axis=1, bitorder="little")
            cells = bits[:, self.bit_of_cell].reshape(n, NUM_PLANES, self.rows, self.cols)
            return cells.astype(np.float32, order="C")
        return self._encode_cells(states)

    def _encode_cells(self, states: Sequence[State]) -> np.ndarray:
        """``encode`` for any board size, plane by plane."""
        n, hw = len(states), self.rows * self.cols
        occ = self.bits_to_cells([s.me for s in states] + [s.opp for s in states])
        planes = np.zeros((n, NUM_PLANES, hw), dtype=np.float32)
        planes[:, 0] = occ[:n]
        planes[:, 1] = occ[n:]
        for i, s in enumerate(states):
            cell = self.last_cell(s)
            if cell >= 0:
                planes[i, 2, cell] = 1.0
            if s.ply % 2 == 0:
                planes[i, 3] = 1.0
        return planes.reshape(n, NUM_PLANES, self.rows, self.cols)

    def _plane_words(self, states: Sequence[State]) -> list[int]:
        """The four planes of each state as bitboards, state by state: its
        stones, the opponent's, the last move's bit (0: none) and every cell
        when the first player is to move (else 0)."""
        words, cell_bits, every = [], self.cell_bits, self.board_bits
        for s in states:
            cell = self.last_cell(s)
            words += (s.me, s.opp, cell_bits[cell] if cell >= 0 else 0, 0 if s.ply & 1 else every)
        return words

    # -- symmetries -------------------------------------------------------
    def _dihedral(self, names: Sequence[str]) -> list[Symmetry]:
        """Symmetries of the board grid; actions are cells (+ pass)."""
        h, w = self.rows, self.cols
        idx = np.arange(h * w).reshape(h, w)
        maps = {
            "identity": idx,
            "flip_lr": idx[:, ::-1],
            "flip_ud": idx[::-1, :],
            "rot180": idx[::-1, ::-1],
            "transpose": idx.T,
            "rot90": np.rot90(idx, 1),
            "rot270": np.rot90(idx, 3),
            "anti_transpose": np.rot90(idx, 2).T,
        }
        out = []
        for name in names:
            src = maps[name].reshape(-1)
            act = np.arange(self.num_actions)
            act[: h * w] = src
            out.append(Symmetry(name, src.copy(), act))
        return out

    def transform(self, state: State, sym: Symmetry) -> State:
        occ = self.bits_to_cells([state.me, state.opp])
        me = self.cells_to_bits(occ[0][sym.cell_src])
        opp = self.cells_to_bits(occ[1][sym.cell_src])
        last = sym.action(state.last) if state.last >= 0 else -1
        return State(me, opp, state.ply, last, state.outcome)

    # -- helpers -------------------------------------------------------------
    def play(self, actions: Sequence[int], state: State | None = None) -> State:
        """Apply a sequence of actions from ``state`` (default: the start)."""
        s = self.initial_state() if state is None else state
        for a in actions:
            s = self.apply(s, a)
        return s

    def _check_action(self, state: State, action: int) -> None:
        if state.outcome is not None:
            raise IllegalMoveError(
                f"the game is over; move {self.format_action(action)} cannot be played"
            )
        if not 0 <= action < self.num_actions:
            raise IllegalMoveError(f"action {action} is outside 0..{self.num_actions - 1}")
