"""Games between two players: colour-balanced and batched.

Each opening (a few random legal moves) is played twice with the colours
swapped, so neither player gains from moving first; all games run together so
network players search them in one batch. Where the games run (worker
processes, a cluster) is the pipeline's business: :mod:`zeroloop.pipeline.matches`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games import Game, random_line
from zeroloop.engine.players import Player
from zeroloop.engine.rating import MatchScore
from zeroloop.engine.search import MoveSchedule


@dataclass(frozen=True, kw_only=True)
class MatchConfig:
    """A match between two searching players (params.yaml ``gate``, ``evaluate``).

    games: games in all, an even number: each opening is played twice with the
        colours swapped.
    simulations: each network player's simulations per move (the rest of its
        search settings are ``mcts``'s, with no root noise).
    opening_plies: uniformly random moves that open each pair of games.
    temperature, temperature_moves: moves sampled at ``temperature`` for the
        first ``temperature_moves`` plies, then the most-visited move.
    """

    games: Annotated[int, at.Ge(2)] = 40
    simulations: Annotated[int, at.Interval(ge=1, le=100_000)] = 100
    opening_plies: Annotated[int, at.Interval(ge=0, le=20)] = 2
    temperature: Annotated[float, at.Interval(ge=0, le=10)] = 0.0
    temperature_moves: Annotated[int, at.Ge(0)] = 0

    def __post_init__(self) -> None:
        check_fields(self, "match")
        even_games(self.games)

    @property
    def schedule(self) -> MoveSchedule:
        return MoveSchedule(temperature=self.temperature, temperature_moves=self.temperature_moves)


def even_games(games: int) -> int:
    """``games`` when it is an even number of at least 2: a colour-balanced
    match plays each opening twice, once with each colour."""
    if games < 2 or games % 2:
        raise ValueError(f"games={games}: must be an even number >= 2 (games are colour-balanced pairs)")
    return games


@dataclass(frozen=True)
class GameResult:
    """One arena game: all moves (opening included), whether A moved first,
    and the result for A (+1 win, 0 draw, -1 loss)."""

    actions: list[int]
    a_first: bool
    result: float


@dataclass
class MatchResult:
    a: str
    b: str
    games: list[GameResult] = field(default_factory=list)
    stopped_early: str | None = None  # the SPRT verdict when it ended the match
    verdict: str | None = None  # the SPRT's status after the last round played (None: no test)

    @property
    def score(self) -> MatchScore:
        r = [g.result for g in self.games]
        return MatchScore(sum(x > 0 for x in r), sum(x == 0 for x in r), sum(x < 0 for x in r))

    def pair_scores(self) -> list[float]:
        """A's mean score over each opening's two games (in [0, 1]); games
        come in pairs, A first then B first, as :func:`play_games` plays them."""
        g = self.games
        return [((g[i].result + 1) / 2 + (g[i + 1].result + 1) / 2) / 2 for i in range(0, len(g) - 1, 2)]


def make_openings(game: Game, plies: int, count: int, rng: np.random.Generator) -> list[list[int]]:
    """``count`` random legal move sequences of ``plies`` moves that leave the
    game running; distinct while enough exist (a few tries each)."""
    seen: set[tuple[int, ...]] = set()
    out: list[list[int]] = []
    for _ in range(count):
        for _attempt in range(20):
            _, moves = random_line(game, plies, rng)
            if tuple(moves) not in seen:
                break
        seen.add(tuple(moves))
        out.append(moves)
    return out


def play_games(game: Game, a: Player, b: Player, openings: Sequence[Sequence[int]],
               on_game: Callable[[GameResult], None] | None = None) -> list[GameResult]:
    """Play every opening twice (A first, then B first), all games at once."""
    starts: list[tuple[list[int], bool]] = [(list(o), first) for o in openings for first in (True, False)]
    n = len(starts)
    states, moves = [], []
    for opening, _ in starts:
        s = game.initial_state()
        for act in opening:
            s = game.apply(s, act)
        states.append(s)
        moves.append(list(opening))
    a.new_games(n)
    b.new_games(n)
    results: list[GameResult | None] = [None] * n
    running = set(range(n))
    while running:
        # the side to move is A when (ply parity) matches (A moved first)
        turn_a = sorted(i for i in running if states[i].first_to_move == starts[i][1])
        turn_b = sorted(running.difference(turn_a))
        for player, idx in ((a, turn_a), (b, turn_b)):
            if not idx:
                continue
            chosen = player.choose(idx, [states[i] for i in idx])
            for i, act in zip(idx, chosen):
                before = states[i]
                states[i] = game.apply(before, act)
                moves[i].append(act)
                a.observe(i, before, act)
                b.observe(i, before, act)
                if states[i].outcome is not None:
                    # outcome is for the side to move now; A is to move iff it is not the mover
                    mover_is_a = player is a
                    res = -states[i].outcome if mover_is_a else states[i].outcome
                    results[i] = GameResult(moves[i], starts[i][1], float(res))
                    running.discard(i)
                    if on_game is not None:
                        on_game(results[i])
    return [r for r in results if r is not None]
