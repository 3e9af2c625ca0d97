"""The `Game` protocol and the bitboard machinery the board games share.

Conventions every game keeps (the compliance test checks them):

* Two players alternate strictly; a pass (Othello) is a move like any other.
* A state is an immutable :class:`State`. ``me``/``opp`` are bitboards of the
  side to move and of its opponent; ``ply`` counts moves played (passes
  included), so the side to move is the first player exactly when ``ply`` is
  even.
* ``outcome`` is ``None`` while the game runs and, once it ended, the result
  from the side to move: +1 win, 0 draw, -1 loss.
* Actions are integers in ``[0, num_actions)``. Cell actions are numbered
  row-major from the top-left cell (row 0 is the top of the rendered board).
* ``encode`` returns float32 planes ``[B, 4, H, W]`` from the side to move:
  its stones, the opponent's stones, the last move (one-hot, empty if none or a
  pass), and a colour plane (all ones when the first player is to move).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

NUM_PLANES = 4


class IllegalMoveError(ValueError):
    """A move that is malformed or not legal in the position it is played in."""


@dataclass(frozen=True, slots=True)
class State:
    """One position. Immutable; ``Game.apply`` returns a new one."""

    me: int
    opp: int
    ply: int = 0
    last: int = -1
    outcome: float | None = None
    passes: int = 0  # consecutive passes just played (Othello)

    @property
    def first_to_move(self) -> bool:
        return self.ply % 2 == 0


@dataclass(frozen=True)
class Symmetry:
    """A board symmetry as two index maps that come from one cell permutation.

    ``cell_src[i]`` is the cell whose content moves to cell ``i``; applying it
    to planes ``x[..., H, W]`` and to policies ``p[..., A]`` keeps them aligned
    by construction. ``action_src`` is the same map over actions (cells, or
    columns in Connect Four, plus a fixed pass action where a game has one).
    """

    name: str
    cell_src: np.ndarray  # [H*W] int
    action_src: np.ndarray  # [A] int

    def planes(self, x: np.ndarray) -> np.ndarray:
        """Map planes ``[..., H, W]`` (numpy) to their image."""
        h, w = x.shape[-2:]
        flat = x.reshape(*x.shape[:-2], h * w)
        return flat[..., self.cell_src].reshape(x.shape)

    def policy(self, p: np.ndarray) -> np.ndarray:
        """Map a policy or legal mask ``[..., A]`` to its image."""
        return p[..., self.action_src]

    def action(self, a: int) -> int:
        """Where action ``a`` goes under this symmetry."""
        return int(np.flatnonzero(self.action_src == a)[0])


@runtime_checkable
class Game(Protocol):
    """What search, training and the tools need from a game."""

    name: str
    rows: int
    cols: int
    num_actions: int
    max_moves: int  # an upper bound on the length of any game

    def initial_state(self) -> State: ...

    def legal_mask(self, state: State) -> np.ndarray:
        """``[A]`` bool; all False in a finished game."""
        ...

    def apply(self, state: State, action: int) -> State:
        """The position after ``action``; raises IllegalMoveError if illegal."""
        ...

    def encode(self, states: Sequence[State]) -> np.ndarray:
        """``[B, 4, H, W]`` float32 planes from each side to move."""
        ...

    def symmetries(self) -> list[Symmetry]: ...

    def transform(self, state: State, sym: Symmetry) -> State:
        """The image of ``state`` under ``sym`` (a position of this game)."""
        ...

    def format_action(self, action: int) -> str: ...

    def parse_action(self, text: str) -> int: ...

    def format_moves(self, actions: Sequence[int]) -> str: ...

    def parse_moves(self, text: str) -> list[int]: ...

    def render(self, state: State) -> str: ...


class BitboardGame:
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
        return State(me, opp, state.ply, last, state.outcome, state.passes)

    # -- helpers -------------------------------------------------------------
    def legal_actions(self, state: State) -> list[int]:
        return [int(a) for a in np.flatnonzero(self.legal_mask(state))]

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

    def render(self, state: State) -> str:
        occ = self.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        last = self.last_cell(state)
        lines = []
        for r in range(self.rows):
            row = []
            for c in range(self.cols):
                i = r * self.cols + c
                ch = "X" if first[i] else "O" if second[i] else "."
                row.append(f"[{ch}]" if i == last else f" {ch} ")
            lines.append(f"{self._row_label(r):>2} " + "".join(row))
        lines.append("   " + "".join(f" {self._col_label(c)} " for c in range(self.cols)))
        side = "X" if state.ply % 2 == 0 else "O"
        if state.outcome is None:
            lines.append(f"{side} to move")
        else:
            lines.append(self.describe_outcome(state))
        return "\n".join(lines)

    def describe_outcome(self, state: State) -> str:
        if state.outcome is None:
            return "game in progress"
        if state.outcome == 0:
            return "draw"
        mover_won = state.outcome > 0
        first_won = mover_won == (state.ply % 2 == 0)
        return f"{'X' if first_won else 'O'} wins"

    def _row_label(self, r: int) -> str:
        return str(self.rows - r)

    def _col_label(self, c: int) -> str:
        return "abcdefghijklmnopqrstuvwxyz"[c]


class DigitNotation:
    """Moves written as one digit each, 1..num_actions, so a game is a digit
    string like ``"4453"`` (Connect Four columns, tic-tac-toe cells)."""

    num_actions: int
    digit_noun = "move"

    def format_action(self, action: int) -> str:
        return str(action + 1)

    def parse_action(self, text: str) -> int:
        t = text.strip()
        if len(t) != 1 or not "1" <= t <= str(self.num_actions):
            raise IllegalMoveError(f"{text!r} is not a {self.digit_noun} 1-{self.num_actions}")
        return int(t) - 1

    def format_moves(self, actions: Sequence[int]) -> str:
        return "".join(self.format_action(a) for a in actions)

    def parse_moves(self, text: str) -> list[int]:
        return [self.parse_action(ch) for ch in text if not ch.isspace()]


def first_player_result(state: State) -> float:
    """Final result from the first player's view (+1, 0, -1)."""
    if state.outcome is None:
        raise ValueError("the game is not over")
    return state.outcome if state.ply % 2 == 0 else -state.outcome


def random_line(game: Game, plies: int, rng: np.random.Generator) -> tuple[State, list[int]]:
    """Up to ``plies`` uniformly random legal moves from the start, stopping
    before a move that would end the game: the position and the moves."""
    state, moves = game.initial_state(), []
    for _ in range(plies):
        legal = np.flatnonzero(game.legal_mask(state))
        a = int(legal[rng.integers(len(legal))])
        nxt = game.apply(state, a)
        if nxt.outcome is not None:
            break
        state, moves = nxt, moves + [a]
    return state, moves
