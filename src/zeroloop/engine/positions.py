"""Measuring strength: solver-labelled test positions and the move error rate
against perfect play.

A position set is built by random play and labelled by a perfect player: for
every legal move, whether it wins, draws or loses with best play. Only
positions where the choice matters (not every legal move has the same result)
are kept. A move is an error when its result is worse than the best move's;
distance to the end is not counted, so a slower win is not an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from zeroloop.engine.games import Game, State, random_line

#: result class of an illegal move in a label row
ILLEGAL = -9


@dataclass
class PositionSet:
    """``moves[i]`` reaches position i from the start; ``labels[i, a]`` is +1
    (win), 0 (draw), -1 (loss) for the side to move after playing a, or
    ``ILLEGAL``. ``labels`` is ``[N, A]`` int8."""

    game: str
    moves: list[list[int]]
    labels: np.ndarray

    def states(self, game: Game) -> list[State]:
        out = []
        for seq in self.moves:
            s = game.initial_state()
            for a in seq:
                s = game.apply(s, a)
            out.append(s)
        return out

    def to_json(self) -> dict:
        return {"game": self.game, "moves": self.moves, "labels": self.labels.tolist()}

    @classmethod
    def from_json(cls, data: dict) -> PositionSet:
        return cls(data["game"], [list(m) for m in data["moves"]], np.asarray(data["labels"], np.int8))


def make_position_set(game: Game, count: int, rng: np.random.Generator,
                      scorer: Callable[[State], dict[int, int]], max_tries: int = 50) -> PositionSet:
    """``count`` distinct positions from random play where the move choice matters."""
    seen: set[tuple[int, int, int]] = set()
    moves_out, labels_out = [], []
    tries = 0
    while len(moves_out) < count and tries < count * max_tries:
        tries += 1
        s, seq = random_line(game, int(rng.integers(0, game.max_moves)), rng)
        key = (s.me, s.opp, s.ply)
        if key in seen:
            continue
        seen.add(key)
        scores = scorer(s)
        row = np.full(game.num_actions, ILLEGAL, np.int8)
        for a, v in scores.items():
            row[a] = np.sign(v)
        legal_vals = row[row != ILLEGAL]
        if legal_vals.min() == legal_vals.max():
            continue  # every move is as good as any other
        moves_out.append(seq)
        labels_out.append(row)
    labels = np.stack(labels_out) if labels_out else np.zeros((0, game.num_actions), np.int8)
    return PositionSet(game.name, moves_out, labels)


@dataclass(frozen=True)
class ErrorRate:
    errors: int
    positions: int

    @property
    def rate(self) -> float:
        return self.errors / self.positions if self.positions else float("nan")


def move_errors(positions: PositionSet, chosen: Sequence[int]) -> ErrorRate:
    """How many of ``chosen`` (one move per position) give away a result."""
    best = positions.labels.max(axis=1)
    got = positions.labels[np.arange(len(chosen)), np.asarray(chosen, int)]
    if np.any(got == ILLEGAL):
        raise ValueError("an illegal move was chosen for a test position")
    return ErrorRate(int((got < best).sum()), len(chosen))
