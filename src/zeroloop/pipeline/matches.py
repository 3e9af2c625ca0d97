"""Matches over worker processes: players described by picklable specs,
openings split into tasks, an optional SPRT that ends a clear match early.

The games themselves are played by :func:`zeroloop.engine.arena.play_games`;
this module decides where they run and how players are built in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from zeroloop.engine.arena import GameResult, MatchResult, make_openings, play_games
from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games import Game, make_game
from zeroloop.engine.players import Player
from zeroloop.engine.rating import SPRT
from zeroloop.engine.search import MoveSchedule, SearchConfig
from zeroloop.pipeline.storage import ShippedFile
from zeroloop.pipeline.workers import Tick, current_backend, default_workers, run_tasks

PlayerKind = Literal["mcts", "random", "greedy", "uct", "perfect"]

#: Matches play the most-visited move from the first ply unless told otherwise.
GREEDY_MOVES = MoveSchedule(temperature=0.0, temperature_moves=0)


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
    """``games`` when it is even; a colour-balanced match needs pairs."""
    if games % 2:
        raise ValueError(f"games={games}: must be even (games are colour-balanced pairs)")
    return games


@dataclass(frozen=True)
class PlayerSpec:
    """How to build a player in a worker process.

    kinds: ``mcts`` (a model file, or a random net when ``model`` is None,
    searched with ``search`` and moving by ``schedule``; root noise is never
    used in matches), ``random``, ``greedy``, ``uct`` (``playouts`` random
    rollouts a move) and ``perfect`` (tic-tac-toe; Connect Four with the
    solver extra).
    """

    kind: PlayerKind
    name: str
    model: str | ShippedFile | None = None
    search: SearchConfig = field(default_factory=SearchConfig)
    schedule: MoveSchedule = GREEDY_MOVES
    playouts: int = 400
    device: str = "auto"
    precision: str = "fp32"

    def build(self, game: Game, rng: np.random.Generator) -> Player:
        from zeroloop.engine import perfect
        from zeroloop.engine import players as P

        if self.kind == "random":
            return P.RandomPlayer(game, rng)
        if self.kind == "greedy":
            return P.GreedyPlayer(game, rng)
        if self.kind == "uct":
            return P.UCTPlayer(game, rng, playouts=self.playouts)
        if self.kind == "perfect":
            return perfect.perfect_player(game, rng)
        if self.kind == "mcts":
            from zeroloop.engine.nn import NetworkEvaluator
            from zeroloop.pipeline.storage import load_or_init_net

            net, _ = load_or_init_net(game, self.model, 0)
            ev = NetworkEvaluator(game, net, self.device, precision=self.precision)
            return P.MCTSPlayer(game, ev, self.search, rng=rng, schedule=self.schedule, noise=False,
                                name=self.name)
        raise ValueError(f"unknown player kind {self.kind!r}")


@dataclass(frozen=True)
class _MatchTask:
    game: str
    a: PlayerSpec
    b: PlayerSpec
    openings: list[list[int]]
    seed: tuple[int, ...]


def _play_task(task: _MatchTask, tick: Tick) -> list[GameResult]:
    game = make_game(task.game)
    rng = np.random.default_rng(np.random.SeedSequence(list(task.seed)))
    pa, pb = task.a.build(game, rng), task.b.build(game, rng)
    return play_games(game, pa, pb, task.openings, on_game=lambda _g: tick(1))


def play_match(game: Game, a: PlayerSpec, b: PlayerSpec, *, games: int, opening_plies: int, seed: int,
               workers: int | None = None, sprt: SPRT | None = None, round_games: int = 20,
               progress: bool = True, desc: str = "") -> MatchResult:
    """``games`` colour-balanced games of A against B (``games`` even).

    Without ``sprt`` all games are split evenly over the workers. With it the
    match is played in rounds of ``round_games`` and stops as soon as the
    test reaches a verdict.
    """
    if games < 2 or games % 2:
        raise ValueError(f"games={games} must be an even number >= 2")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA7E4A]))
    openings = make_openings(game, opening_plies, games // 2, rng)
    n_workers = workers or default_workers()
    if not current_backend().shares_files:  # the models travel with the tasks
        a, b = (replace(x, model=ShippedFile(x.model)) if isinstance(x.model, str) else x for x in (a, b))
    per_round = len(openings) if sprt is None else max(1, round_games // 2)
    result = MatchResult(a.name, b.name)
    for r0 in range(0, len(openings), per_round):
        chunk = openings[r0:r0 + per_round]
        parts = max(1, min(n_workers, len(chunk)))
        tasks = [_MatchTask(game.name, a, b, chunk[k::parts], (seed, r0, k)) for k in range(parts)]
        label = desc or f"{a.name} vs {b.name}"
        for part in run_tasks(_play_task, tasks, workers=n_workers, total=2 * len(chunk),
                              desc=label, unit="game", progress=progress):
            result.games.extend(part)
        if sprt is not None:
            verdict = sprt.status(result.score)
            if verdict != "continue" and r0 + per_round < len(openings):
                result.stopped_early = verdict
                break
    return result
