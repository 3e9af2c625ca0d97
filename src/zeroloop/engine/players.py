"""Players: one protocol for everything that picks moves.

Players are driven in batches so that network players search many games at
once: ``new_games(n)`` opens n game slots, ``choose(indices, states)`` asks
for a move in some of them, and ``observe(index, before, action)`` reports
every move played (by either side) so a searching player can keep its tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from zeroloop.engine.games import Game, State
from zeroloop.engine.search import (
    GREEDY,
    BatchedMCTS,
    Evaluator,
    MoveSchedule,
    SearchConfig,
    SearchResult,
    chosen_moves,
)
from zeroloop.engine.search.uct import uct_search


@runtime_checkable
class Player(Protocol):
    name: str

    def new_games(self, n: int) -> None: ...

    def choose(self, indices: Sequence[int], states: Sequence[State]) -> list[int]: ...

    def observe(self, index: int, before: State, action: int) -> None: ...


class PositionPlayer:
    """Base for players that decide each position on its own."""

    name = "player"

    def new_games(self, n: int) -> None:
        pass

    def observe(self, index: int, before: State, action: int) -> None:
        pass

    def choose(self, indices: Sequence[int], states: Sequence[State]) -> list[int]:
        return [self.move(s) for s in states]

    def move(self, state: State) -> int:
        raise NotImplementedError


class RandomPlayer(PositionPlayer):
    def __init__(self, game: Game, rng: np.random.Generator) -> None:
        self.game, self.rng, self.name = game, rng, "random"

    def move(self, state: State) -> int:
        legal = np.flatnonzero(self.game.legal_mask(state))
        return int(legal[self.rng.integers(len(legal))])


class GreedyPlayer(PositionPlayer):
    """One step of lookahead: win at once if possible, else avoid moves that
    give the opponent an immediate win, else random."""

    def __init__(self, game: Game, rng: np.random.Generator) -> None:
        self.game, self.rng, self.name = game, rng, "greedy"

    def move(self, state: State) -> int:
        g = self.game
        legal = [int(a) for a in np.flatnonzero(g.legal_mask(state))]
        safe = []
        for a in legal:
            s = g.apply(state, a)
            if s.outcome is not None and s.outcome < 0:  # the opponent to move has lost
                return a
            if s.outcome is None and not any(
                    g.apply(s, int(b)).outcome == -1 for b in np.flatnonzero(g.legal_mask(s))):
                safe.append(a)
            elif s.outcome is not None:
                safe.append(a)
        pool = safe or legal
        return pool[int(self.rng.integers(len(pool)))]


class UCTPlayer(PositionPlayer):
    """Pure UCT with random rollouts (no network); plays the most-visited move."""

    def __init__(self, game: Game, rng: np.random.Generator, *, playouts: int = 1000,
                 c: float = 1.4) -> None:
        if playouts < 1:
            raise ValueError(f"uct playouts={playouts} must be >= 1")
        self.game, self.rng, self.playouts, self.c = game, rng, playouts, c
        self.name = f"uct{playouts}"

    def move(self, state: State) -> int:
        visits = uct_search(self.game, state, self.playouts, self.c, self.rng)
        return max(visits, key=visits.get)


class MCTSPlayer:
    """A network (or any evaluator) searched by batched PUCT MCTS."""

    def __init__(self, game: Game, evaluator: Evaluator, config: SearchConfig, *,
                 rng: np.random.Generator, schedule: MoveSchedule | None = None,
                 noise: bool = False, name: str = "mcts") -> None:
        self.game, self.evaluator, self.config = game, evaluator, config
        self.rng, self.noise, self.name = rng, noise, name
        self.schedule = schedule or GREEDY
        self.search: BatchedMCTS | None = None
        self.last: SearchResult | None = None

    def new_games(self, n: int) -> None:
        if self.search is None or self.search.num_slots < n:
            self.search = BatchedMCTS(self.game, self.evaluator, self.config, n, rng=self.rng)
        self._synced = [False] * n

    def choose(self, indices: Sequence[int], states: Sequence[State]) -> list[int]:
        if self.search is None:
            self.new_games(max(indices) + 1)
        search = self.search
        for i, s in zip(indices, states):
            if not self._synced[i] or search.root_state(i) != s:
                search.set_root(i, s)
                self._synced[i] = True
        self.last = search.search(list(indices), add_noise=self.noise)
        return chosen_moves(self.last, [s.ply for s in states], self.schedule, self.rng)

    def observe(self, index: int, before: State, action: int) -> None:
        if self.search is None or not self._synced[index]:
            return
        if self.search.root_state(index) != before:
            self._synced[index] = False
            return
        after = self.search.advance(index, action)
        self._synced[index] = after.outcome is None
