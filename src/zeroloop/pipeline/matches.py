"""Matches over worker processes: players described by picklable specs,
openings split into tasks, an optional SPRT that ends a clear match early.

The games themselves are played by :func:`zeroloop.engine.arena.play_games`;
this module decides where they run and how players are built in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from zeroloop.engine.arena import GameResult, MatchResult, even_games, make_openings, play_games
from zeroloop.engine.games import Game, make_game
from zeroloop.engine.players import Player
from zeroloop.engine.rating import SPRT
from zeroloop.engine.search import GREEDY, MoveSchedule, SearchConfig
from zeroloop.pipeline.data.storage import ShippedFile
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.runtime.backend import Tick, current_backend
from zeroloop.pipeline.runtime.workers import default_workers, run_tasks

PlayerKind = Literal["mcts", "random", "greedy", "uct", "perfect", "gnugo"]


@dataclass(frozen=True)
class PlayerSpec:
    """How to build a player in a worker process.

    kinds: ``mcts`` (a model file, or a random net when ``model`` is None,
    searched with ``search`` and moving by ``schedule``; root noise is never
    used in matches), ``random``, ``greedy``, ``uct`` (``playouts`` random
    rollouts a move), ``perfect`` (tic-tac-toe; Connect Four with the
    solver extra) and ``gnugo`` (Go: GnuGo over GTP at ``level``).
    """

    kind: PlayerKind
    name: str
    model: str | ShippedFile | None = None
    search: SearchConfig = field(default_factory=SearchConfig)
    schedule: MoveSchedule = GREEDY  # the most-visited move from the first ply
    playouts: int = 400
    device: str = "auto"
    precision: str = "fp32"
    level: int = 0  # gnugo only: GnuGo's --level (1-10)

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
        if self.kind == "gnugo":
            from zeroloop.engine.gtp_client import GtpPlayer, gnugo_command

            return GtpPlayer(game, gnugo_command(self.level, seed=int(rng.integers(2**31))), self.name)
        if self.kind == "mcts":
            from zeroloop.engine.nn import NetworkEvaluator
            from zeroloop.pipeline.data.storage import load_or_init_net

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
    even_games(games)
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
            result.verdict = sprt.status(result.pair_scores())
            if result.verdict != "continue" and r0 + per_round < len(openings):
                result.stopped_early = result.verdict
                break
    return result


def model_player(p: Params, path: str, name: str, match) -> PlayerSpec:
    """A model searched as a gate or evaluation match sets it (``match``: ``p.gate``, ``p.evaluate``)."""
    return PlayerSpec("mcts", name, model=path, search=p.match_search(match),
                      schedule=match.config().schedule,
                      device=p.runtime.device, precision=p.runtime.precision)
