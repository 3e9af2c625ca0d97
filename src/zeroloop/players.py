"""Players: one protocol for everything that picks moves.

Players are driven in batches so that network players search many games at
once: ``new_games(n)`` opens n game slots, ``choose(indices, states)`` asks
for a move in some of them, and ``observe(index, before, action)`` reports
every move played (by either side) so a searching player can keep its tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Protocol, runtime_checkable

import numpy as np

from zeroloop.games import ConnectFour, Game, State, TicTacToe
from zeroloop.search.mcts import BatchedMCTS, Evaluator, MoveSchedule, SearchConfig, SearchResult, choose_move
from zeroloop.search.uct import uct_search


@runtime_checkable
class Player(Protocol):
    name: str

    def new_games(self, n: int) -> None: ...

    def choose(self, indices: Sequence[int], states: Sequence[State]) -> list[int]: ...

    def observe(self, index: int, before: State, action: int) -> None: ...


class _OneByOne:
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


class RandomPlayer(_OneByOne):
    def __init__(self, game: Game, rng: np.random.Generator) -> None:
        self.game, self.rng, self.name = game, rng, "random"

    def move(self, state: State) -> int:
        legal = np.flatnonzero(self.game.legal_mask(state))
        return int(legal[self.rng.integers(len(legal))])


class GreedyPlayer(_OneByOne):
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


class UCTPlayer(_OneByOne):
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


class PerfectTicTacToe(_OneByOne):
    """Exhaustive negamax: picks uniformly among the moves with the best
    result, preferring quicker wins and slower losses."""

    def __init__(self, rng: np.random.Generator, game: TicTacToe | None = None) -> None:
        self.game = game or TicTacToe()
        self.rng, self.name = rng, "perfect"

    def scores(self, state: State) -> dict[int, int]:
        """Move -> score for the side to move (>0 win, 0 draw, <0 loss)."""
        return {a: -_negamax(self.game, self.game.apply(state, a))
                for a in np.flatnonzero(self.game.legal_mask(state)).tolist()}

    def move(self, state: State) -> int:
        scores = self.scores(state)
        best = max(scores.values())
        choices = [a for a, v in scores.items() if v == best]
        return choices[int(self.rng.integers(len(choices)))]


@cache
def _negamax_cached(me: int, opp: int, ply: int, outcome: float | None) -> int:
    game = _TTT
    s = State(me, opp, ply, -1, outcome)
    if outcome is not None:
        return int(outcome) * (10 - ply)  # quicker wins score higher
    return max(-_negamax_cached(t.me, t.opp, t.ply, t.outcome)
               for t in (game.apply(s, int(a)) for a in np.flatnonzero(game.legal_mask(s))))


_TTT = TicTacToe()


def _negamax(game: TicTacToe, s: State) -> int:
    return _negamax_cached(s.me, s.opp, s.ply, s.outcome)


class PerfectConnectFour(_OneByOne):
    """Perfect Connect Four through the optional ``bitbully`` solver (with its
    opening book); picks uniformly among the best-scoring moves."""

    def __init__(self, rng: np.random.Generator, game: ConnectFour | None = None) -> None:
        self.game = game or ConnectFour()
        self.rng, self.name = rng, "perfect"
        self._solver = connect4_solver()

    def scores(self, state: State) -> dict[int, int]:
        """Column -> solver score for the side to move (>0 win, 0 draw, <0 loss)."""
        import bitbully

        occ = self.game.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        grid = (first.astype(int) + 2 * second.astype(int)).reshape(6, 7).tolist()
        return dict(self._solver.score_all_moves(bitbully.Board(grid)))

    def move(self, state: State) -> int:
        scores = self.scores(state)
        best = max(scores.values())
        choices = sorted(a for a, v in scores.items() if v == best)
        return choices[int(self.rng.integers(len(choices)))]


def connect4_solver():
    """The bitbully solver, or a clear error when the extra is missing."""
    try:
        import bitbully
    except ImportError:
        raise RuntimeError(
            "the perfect Connect Four player needs the optional solver: "
            "pip install 'zeroloop[solver]' (the bitbully package)") from None
    return bitbully.BitBully()


class MCTSPlayer:
    """A network (or any evaluator) searched by batched PUCT MCTS."""

    def __init__(self, game: Game, evaluator: Evaluator, config: SearchConfig, *,
                 rng: np.random.Generator, schedule: MoveSchedule | None = None,
                 noise: bool = False, name: str = "mcts") -> None:
        self.game, self.evaluator, self.config = game, evaluator, config
        self.rng, self.noise, self.name = rng, noise, name
        self.schedule = schedule or MoveSchedule(temperature=0.0, temperature_moves=0)
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
        return [choose_move(v, self.schedule.temperature_at(s.ply), self.rng)
                for v, s in zip(self.last.visits, states)]

    def observe(self, index: int, before: State, action: int) -> None:
        if self.search is None or not self._synced[index]:
            return
        if self.search.root_state(index) != before:
            self._synced[index] = False
            return
        after = self.search.advance(index, action)
        self._synced[index] = after.outcome is None
