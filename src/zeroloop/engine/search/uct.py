"""Pure UCT with random rollouts: the classic baseline (no network).

UCB1 picks ``argmax  Q + c * sqrt(ln N_parent / N_child)``; every iteration
expands one node and finishes the game with uniformly random moves. A game
with a ``uct_visits(state, playouts, c, rng)`` method (Connect Four: a numba
kernel over arrays) runs the same search there, draw for draw of ``rng``;
the others run :func:`generic_uct_search`.
"""

from __future__ import annotations

import math
from math import sqrt

import numpy as np

from zeroloop.engine.games.base import Game, State
from zeroloop.engine.search.rollout import random_rollout


class _Node:
    __slots__ = ("state", "children", "untried", "n", "w")

    def __init__(self, state: State, game: Game) -> None:
        self.state = state
        self.children: dict[int, _Node] = {}
        self.untried = [int(a) for a in np.flatnonzero(game.legal_mask(state))]
        self.n = 0
        self.w = 0.0  # summed results for the player who moved INTO this node


def uct_search(game: Game, state: State, playouts: int, c: float,
               rng: np.random.Generator) -> dict[int, int]:
    """Run ``playouts`` UCT iterations from ``state``; returns visits per move,
    in the order the moves were first tried."""
    if state.outcome is not None:
        raise ValueError("cannot search a finished game")
    fast = getattr(game, "uct_visits", None)
    if fast is not None:
        return fast(state, playouts, c, rng)
    return generic_uct_search(game, state, playouts, c, rng)


def generic_uct_search(game: Game, state: State, playouts: int, c: float,
                       rng: np.random.Generator) -> dict[int, int]:
    """:func:`uct_search` through the ``Game`` protocol: a ``_Node`` (and a
    ``State``) per expanded move."""
    if state.outcome is not None:
        raise ValueError("cannot search a finished game")
    root = _Node(state, game)
    for _ in range(playouts):
        node, path = root, [root]
        while not node.untried and node.children:
            log_n = math.log(node.n)
            best, best_v = None, -math.inf
            for ch in node.children.values():  # the first of the best, as max() would pick
                v = ch.w / ch.n + c * sqrt(log_n / ch.n)
                if v > best_v:
                    best, best_v = ch, v
            node = best
            path.append(node)
        if node.untried:
            a = node.untried.pop(int(rng.integers(len(node.untried))))
            child = _Node(game.apply(node.state, a), game)
            node.children[a] = child
            node = child
            path.append(node)
        s = node.state
        # result for the side to move at `node`
        z = s.outcome if s.outcome is not None else random_rollout(game, s, rng)
        for n in reversed(path):
            n.n += 1
            n.w += -z  # the mover into n is n's opponent
            z = -z
    return {a: ch.n for a, ch in root.children.items()}
