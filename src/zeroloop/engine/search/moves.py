"""From search visits to the move played: the visit policy, sampling at a
temperature, and the temperature schedule over a game."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zeroloop.engine.config import Annotated, at, check_fields


def visit_policy(visits: np.ndarray, temperature: float) -> np.ndarray:
    """Move probabilities pi ~ N^(1/tau) from ``[..., A]`` visit counts.

    ``temperature == 0`` puts all mass on the most-visited move (the first
    one on ties).
    """
    visits = np.asarray(visits, dtype=np.float64)
    if temperature == 0:
        out = np.zeros_like(visits)
        idx = visits.argmax(axis=-1)
        np.put_along_axis(out, np.expand_dims(idx, -1), 1.0, axis=-1)
        return out
    scaled = np.power(visits / np.maximum(visits.max(axis=-1, keepdims=True), 1e-12),
                      1.0 / temperature)
    return scaled / scaled.sum(axis=-1, keepdims=True)


def choose_move(visits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """Sample a move from ``visits`` (counts, or a policy) made a policy at ``temperature`` (0: argmax)."""
    if temperature == 0:
        return int(np.argmax(visits))  # the visit policy's one move, without building it
    pi = visit_policy(visits, temperature)
    return int(rng.choice(len(pi), p=pi))


@dataclass(frozen=True, kw_only=True)
class MoveSchedule:
    """Temperature schedule: ``temperature`` for the first ``temperature_moves``
    plies of a game, then the most-visited move (AlphaZero: 1.0 for 30 moves
    in chess and Go)."""

    temperature: Annotated[float, at.Interval(ge=0, le=10)] = 1.0
    temperature_moves: Annotated[int, at.Ge(0)] = 10

    def __post_init__(self) -> None:
        check_fields(self, "schedule")

    def temperature_at(self, ply: int) -> float:
        return self.temperature if ply < self.temperature_moves else 0.0


def considered_visits(considered: int, simulations: int) -> list[int]:
    """Sequential halving's schedule (Danihelka et al. 2022): for each
    simulation, how many visits the root move it picks must already have.

    The ``considered`` moves are visited in phases; a phase gives each move
    still in play ``max(1, floor(n / (ceil(log2 m) * moves in play)))`` more
    visits, then halves the moves in play (never below two). A move is picked
    among those with the wanted count by its score, so the weaker half of a
    phase falls behind and is not picked again. One move gets every visit.
    """
    if considered <= 1:
        return list(range(simulations))
    phases = max(1, int(np.ceil(np.log2(considered))))
    out: list[int] = []
    visits, in_play = 0, considered
    while len(out) < simulations:
        extra = max(1, simulations // (phases * in_play))
        for _ in range(extra):
            out.extend([visits] * in_play)
            visits += 1
        in_play = max(2, in_play // 2)
    return out[:simulations]
