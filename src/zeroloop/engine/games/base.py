"""The `Game` protocol: what search, training and the tools need from a game.

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
* ``encode`` returns float32 planes ``[B, P, H, W]`` from the side to move:
  its stones, the opponent's stones, the last move (one-hot, empty if none or a
  pass), and a colour plane (all ones when the first player is to move); ``P``
  is 4, or a game's own ``num_planes`` where it adds planes of its own after
  those four (Go: the stones of the last few positions). ``encode`` reads only
  the stones, the last move, the side to move and, where a state has one, its
  ``planes_key`` (what the extra planes come from): the evaluators cache
  answers by these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

NUM_PLANES = 4


def input_planes(game) -> int:
    """How many planes ``game.encode`` gives: the four every game shares, or
    the game's own ``num_planes``."""
    return int(getattr(game, "num_planes", NUM_PLANES))


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

    @property
    def first_to_move(self) -> bool:
        return self.ply % 2 == 0


class Rows(NamedTuple):
    """Positions as rows of four int64 arrays, for games whose search keeps
    its positions in arrays (a game with ``apply_rows``: Connect Four's
    kernels): row ``i`` is ``State(me[i], opp[i], ply[i], last[i])`` of a
    running game. The search's tree holds one row per node."""

    me: np.ndarray
    opp: np.ndarray
    ply: np.ndarray
    last: np.ndarray

    @classmethod
    def empty(cls, n: int) -> Rows:
        return cls(*(np.zeros(n, np.int64) for _ in range(4)))

    @classmethod
    def of(cls, states: Sequence[State]) -> Rows:
        return cls(*(np.array([getattr(s, f) for s in states], np.int64).reshape(-1)
                     for f in ("me", "opp", "ply", "last")))

    def put(self, i: int, state: State) -> None:
        self.me[i], self.opp[i], self.ply[i], self.last[i] = state.me, state.opp, state.ply, state.last

    def state(self, i: int) -> State:
        return State(int(self.me[i]), int(self.opp[i]), int(self.ply[i]), int(self.last[i]))


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
        """``[B, P, H, W]`` float32 planes from each side to move (P: :func:`input_planes`)."""
        ...

    def symmetries(self) -> list[Symmetry]: ...

    def transform(self, state: State, sym: Symmetry) -> State:
        """The image of ``state`` under ``sym`` (a position of this game)."""
        ...

    def format_action(self, action: int) -> str: ...

    def parse_action(self, text: str) -> int: ...

    def format_moves(self, actions: Sequence[int]) -> str: ...

    def parse_moves(self, text: str) -> list[int]: ...

    def render(self, state: State) -> str:
        """The board as text, with whose move it is or the result."""
        ...

    def describe_outcome(self, state: State) -> str:
        """``X wins``, ``O wins``, ``draw`` or ``game in progress``."""
        ...


def batched_legal_masks(game: Game) -> Callable[[Sequence[State]], np.ndarray]:
    """``states -> [B, A]`` bool, ``legal_mask`` of each state: the game's own
    ``legal_masks`` where it has one (Connect Four: a table lookup) and the class
    that defines it defines ``legal_mask`` too (a subclass that changes one
    changes both, or gets the generic stack), else the masks stacked one by one."""
    owner = {name: next((c for c in type(game).__mro__ if name in c.__dict__), None)
             for name in ("legal_mask", "legal_masks")}
    if owner["legal_masks"] is not None and owner["legal_masks"] is owner["legal_mask"]:
        return game.legal_masks

    def stacked(states: Sequence[State]) -> np.ndarray:
        return np.stack([game.legal_mask(s) for s in states])

    return stacked


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
