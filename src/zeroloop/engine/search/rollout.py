"""Random rollouts: the value estimate of pure Monte Carlo search."""

from __future__ import annotations

import numpy as np

from zeroloop.engine.games.base import Game, State


def random_rollout(game: Game, state: State, rng: np.random.Generator) -> float:
    """Play uniformly random moves to the end; result from ``state``'s mover.

    A game with a ``random_playout(state, rng)`` method (the k-in-a-row games)
    plays the same moves with the same draws of ``rng`` without building a
    state per move; the others go through ``legal_mask`` and ``apply``.
    """
    fast = getattr(game, "random_playout", None)
    if fast is not None:
        return fast(state, rng)
    return generic_rollout(game, state, rng)


def generic_rollout(game: Game, state: State, rng: np.random.Generator) -> float:
    """:func:`random_rollout` through the ``Game`` protocol alone."""
    s = state
    while s.outcome is None:
        legal = np.flatnonzero(game.legal_mask(s))
        s = game.apply(s, int(legal[rng.integers(len(legal))]))
    return s.outcome if (s.ply - state.ply) % 2 == 0 else -s.outcome
