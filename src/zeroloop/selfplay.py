"""Self-play: many games advance together through one batched search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from zeroloop.games import Game, first_player_result
from zeroloop.search.mcts import BatchedMCTS, Evaluator, MoveSchedule, SearchConfig, SearchStats, choose_move


@dataclass
class GameRecord:
    """One finished game.

    actions: ``[T]`` moves played. policies: ``[T, A]`` float32 visit
    distributions (the training targets). values: ``[T]`` root values from the
    side to move. result: +1/0/-1 from the first player's view.
    """

    actions: list[int]
    policies: np.ndarray
    values: np.ndarray
    result: float


@dataclass
class _Running:
    actions: list[int] = field(default_factory=list)
    policies: list[np.ndarray] = field(default_factory=list)
    values: list[float] = field(default_factory=list)


def play_selfplay_games(game: Game, evaluator: Evaluator, config: SearchConfig,
                        schedule: MoveSchedule, num_games: int, *,
                        rng: np.random.Generator, parallel_games: int = 64,
                        on_game: Callable[[GameRecord], None] | None = None,
                        stats: SearchStats | None = None) -> list[GameRecord]:
    """Play ``num_games`` games of the evaluator against itself.

    ``parallel_games`` games share each search step (one evaluator call for
    all their leaves); a finished game's slot starts the next game at once so
    batches stay full. Root noise is on; moves follow ``schedule``. The same
    ``rng`` state and a deterministic evaluator give the same games.
    """
    if num_games < 1:
        return []
    slots = min(parallel_games, num_games)
    mcts = BatchedMCTS(game, evaluator, config, slots, rng=rng)
    running: dict[int, _Running] = {}
    done: list[GameRecord] = []
    started = 0
    for slot in range(slots):
        mcts.set_root(slot, game.initial_state())
        running[slot] = _Running()
        started += 1
    while running:
        order = sorted(running)
        res = mcts.search(order, add_noise=True)
        for j, slot in enumerate(order):
            rec = running[slot]
            state = mcts.root_state(slot)
            visits = res.visits[j]
            action = choose_move(visits, schedule.temperature_at(state.ply), rng)
            rec.actions.append(action)
            rec.policies.append((visits / visits.sum()).astype(np.float32))
            rec.values.append(float(res.value[j]))
            new = mcts.advance(slot, action)
            if new.outcome is None:
                continue
            record = GameRecord(rec.actions, np.stack(rec.policies),
                                np.asarray(rec.values, np.float32), first_player_result(new))
            done.append(record)
            if on_game is not None:
                on_game(record)
            del running[slot]
            if started < num_games:
                mcts.set_root(slot, game.initial_state())
                running[slot] = _Running()
                started += 1
    if stats is not None:
        stats.merge(mcts.stats)
    return done
