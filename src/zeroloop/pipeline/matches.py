"""Matches over worker processes: players described by picklable specs,
openings split into tasks, an optional SPRT that ends a clear match early.

The games themselves are played by :func:`zeroloop.engine.arena.play_games`;
this module decides where they run and how players are built in a worker.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from zeroloop.engine.arena import GameResult, MatchResult, even_games, make_openings, play_games
from zeroloop.engine.games import Game, make_game
from zeroloop.engine.players import Player
from zeroloop.engine.rating import SPRT
from zeroloop.engine.search import GREEDY, MoveSchedule, SearchConfig
from zeroloop.pipeline.data.storage import ShippedFile, read_checked_model
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
class MatchTask:
    """Some of a match's openings, each played with both colours, in one worker."""

    game: str
    a: PlayerSpec
    b: PlayerSpec
    openings: list[list[int]]
    seed: tuple[int, ...]


def play_match_task(task: MatchTask, tick: Tick) -> list[GameResult]:
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
    openings = match_openings(game, games, opening_plies, seed)
    n_workers = workers or default_workers()
    per_round = len(openings) if sprt is None else max(1, round_games // 2)
    result = MatchResult(a.name, b.name)
    with PinnedModels() as pins:
        a, b = pins.spec(a), pins.spec(b)
        for r0 in range(0, len(openings), per_round):
            chunk = openings[r0:r0 + per_round]
            tasks = match_tasks(game, a, b, chunk, seed=seed, first=r0, workers=n_workers)
            label = desc or f"{a.name} vs {b.name}"
            for part in run_tasks(play_match_task, tasks, workers=n_workers, total=2 * len(chunk),
                                  desc=label, unit="game", progress=progress):
                result.games.extend(part)
            if sprt is not None:
                result.verdict = sprt.status(result.pair_scores())
                if result.verdict != "continue" and r0 + per_round < len(openings):
                    result.stopped_early = result.verdict
                    break
    return result


def match_openings(game: Game, games: int, opening_plies: int, seed: int) -> list[list[int]]:
    """The openings of a match of ``games`` colour-balanced games (``games`` even)."""
    even_games(games)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA7E4A]))
    return make_openings(game, opening_plies, games // 2, rng)


def match_tasks(game: Game, a: PlayerSpec, b: PlayerSpec, openings: list[list[int]], *, seed: int,
                first: int = 0, workers: int) -> list[MatchTask]:
    """``openings`` (the match's from number ``first`` on) split over at most
    ``workers`` tasks, each seeded by ``(seed, first, k)``: the games depend
    on the number of tasks, so every caller splits the same way."""
    parts = max(1, min(workers, len(openings)))
    return [MatchTask(game.name, a, b, openings[k::parts], (seed, first, k)) for k in range(parts)]


class PinnedModels:
    """Model files as a call's tasks get them, each read once, when first
    asked for (a damaged file fails there, naming it): where the backend's
    tasks share this machine's files, a private copy in a temporary folder
    that the ``with`` block owns and deletes; else the bytes inside the task
    (:class:`~zeroloop.pipeline.data.storage.ShippedFile`, for Ray nodes with
    their own disks). Either way every task of the call reads the bytes that
    were there when it began, so a file replaced while the tasks run is
    measured whole, as it was, never as a mix of two networks."""

    def __init__(self) -> None:
        self._copies: dict[str, str | ShippedFile] = {}
        self._folder: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> PinnedModels:
        return self

    def __exit__(self, *exc) -> None:
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def model(self, path: str) -> str | ShippedFile:
        """``path`` as the tasks get it."""
        if path not in self._copies:
            self._copies[path] = (self.local(path) if current_backend().shares_files
                                  else ShippedFile(path, read_checked_model(path)))
        return self._copies[path]

    def local(self, path: str) -> str:
        """A private copy of ``path`` on this machine, whatever the backend."""
        if self._folder is None:
            self._folder = tempfile.TemporaryDirectory(prefix="zeroloop-models-")
        copy = Path(self._folder.name, f"{len(os.listdir(self._folder.name))}-{Path(path).name}")
        copy.write_bytes(read_checked_model(path))
        return str(copy)

    def spec(self, spec: PlayerSpec) -> PlayerSpec:
        """``spec`` with its model file as the tasks get it."""
        return replace(spec, model=self.model(spec.model)) if isinstance(spec.model, str) else spec


def model_player(p: Params, path: str, name: str, match) -> PlayerSpec:
    """A model searched as a gate or evaluation match sets it (``match``: ``p.gate``, ``p.evaluate``)."""
    return PlayerSpec("mcts", name, model=path, search=p.match_search(match),
                      schedule=match.config().schedule,
                      device=p.runtime.device, precision=p.runtime.precision)
