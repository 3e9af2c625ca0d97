"""Random rollouts: the value estimate of pure Monte Carlo search."""

from __future__ import annotations

import numpy as np

from zeroloop.engine.games.base import Game, State


def random_rollout(game: Game, state: State, rng: np.random.Generator) -> float:
    """Play uniformly random moves to the end; result from ``state``'s mover."""
    s = state
    while s.outcome is None:
        legal = np.flatnonzero(game.legal_mask(s))
        s = game.apply(s, int(legal[rng.integers(len(legal))]))
    return s.outcome if (s.ply - state.ply) % 2 == 0 else -s.outcome
