"""The move a search plays: one answer for self-play, matches, evaluation,
tuning and analysis.

While the schedule's temperature for the position's ply is above 0, the
move is drawn from the search's policy target at that temperature: the
root's visit counts under ``algorithm: puct``, the improved policy under
``gumbel`` (as the Gumbel recipe that matched AlphaZero.jl's Connect Four
curve plays, its issue 217). Past ``temperature_moves``, or at temperature 0
(matches, evaluation, tuning and analysis), the search's own choice: the
most-visited move (the first on ties), or the winner of Gumbel's sequential
halving (:attr:`SearchResult.action`; Danihelka et al. 2022 play it
throughout: ``temperature_moves: 0``).
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
        (self-play: each game its own); needed only when a row is sampled
        at a temperature above 0.
    """
    if len(plies) != len(result.visits):
        raise ValueError(f"{len(plies)} plies for {len(result.visits)} searched positions")
    rngs = rng if isinstance(rng, Sequence) else [rng] * len(plies)
    schedules = schedule if isinstance(schedule, Sequence) else [schedule] * len(plies)
    gumbel = result.action is not None
    out = []
    for row, (ply, r, sched) in enumerate(zip(plies, rngs, schedules, strict=True)):
        temperature = sched.temperature_at(ply)
        if temperature > 0 and r is None:
            raise ValueError(f"a move sampled at temperature {temperature} needs a random generator")
        if gumbel and temperature == 0:
            out.append(int(result.action[row]))  # the halving's winner
        else:  # PUCT: from the visits; Gumbel: from the improved policy (both: the policy target)
            out.append(choose_move(result.policy[row] if gumbel else result.visits[row], temperature, r))
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
