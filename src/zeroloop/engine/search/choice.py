"""The move a search plays: one answer for self-play, matches, evaluation,
tuning and analysis.

Under ``algorithm: gumbel`` the search itself chooses (the winner of the
sequential halving, :attr:`SearchResult.action`); under ``puct`` the move is
drawn from the root's visit counts at the schedule's temperature for the
position's ply, and is the most-visited move (the first on ties) past
``temperature_moves`` or at temperature 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zeroloop.engine.games import State
from zeroloop.engine.search.moves import MoveSchedule, choose_move
from zeroloop.engine.search.tree import BatchedMCTS, SearchResult

#: The most-visited move from the first ply: how matches, evaluation and analysis play.
GREEDY = MoveSchedule(temperature=0.0, temperature_moves=0)


def chosen_moves(result: SearchResult, plies: Sequence[int],
                 schedule: MoveSchedule | Sequence[MoveSchedule] = GREEDY,
                 rng: np.random.Generator | Sequence[np.random.Generator] | None = None) -> list[int]:
    """The move played after each row of ``result`` (``[S]`` moves).

    plies: ``[S]`` the ply of each searched position (the schedule's clock).
    schedule: one for all rows, or one per row (self-play games whose
        temperature lasts a different number of plies).
    rng: one generator for all rows, drawn from in row order, or one per row
        (self-play: each game its own); needed only when a PUCT row is sampled
        at a temperature above 0.
    """
    if result.action is not None:  # Gumbel: the search chose
        return [int(a) for a in result.action]
    if len(plies) != len(result.visits):
        raise ValueError(f"{len(plies)} plies for {len(result.visits)} searched positions")
    rngs = rng if isinstance(rng, Sequence) else [rng] * len(plies)
    schedules = schedule if isinstance(schedule, Sequence) else [schedule] * len(plies)
    out = []
    for visits, ply, r, sched in zip(result.visits, plies, rngs, schedules, strict=True):
        temperature = sched.temperature_at(ply)
        if temperature > 0 and r is None:
            raise ValueError(f"a move sampled at temperature {temperature} needs a random generator")
        out.append(choose_move(visits, temperature, r))
    return out


def search_moves(mcts: BatchedMCTS, states: Sequence[State], schedule: MoveSchedule = GREEDY,
                 rng: np.random.Generator | None = None) -> tuple[list[int], SearchResult]:
    """Search ``states`` from fresh roots in slots ``0 .. len(states) - 1`` of
    ``mcts``, all in one batch and without root noise, and return the moves
    played (:func:`chosen_moves`) with the search result (rows in the order of
    ``states``). ``mcts`` needs at least ``len(states)`` slots."""
    if len(states) > mcts.num_slots:
        raise ValueError(f"{len(states)} positions for a search of {mcts.num_slots} slots")
    for i, s in enumerate(states):
        mcts.set_root(i, s)
    res = mcts.search(list(range(len(states))), add_noise=False)
    return chosen_moves(res, [s.ply for s in states], schedule, rng), res
