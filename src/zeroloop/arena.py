"""Matches between two players: colour-balanced, batched, over worker processes.

Each opening (a few random legal moves) is played twice with the colours
swapped, so neither player gains from moving first; all games of a task run
together so network players search them in one batch. Players are described
by picklable :class:`PlayerSpec` so that worker processes can build them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zeroloop.games import Game, make_game, random_line
from zeroloop.players import Player
from zeroloop.rating import SPRT, MatchScore
from zeroloop.workers import Tick, run_tasks


@dataclass(frozen=True)
class PlayerSpec:
    """How to build a player. kinds: ``mcts`` (a model file, or a random net
    when ``model`` is None, searched with ``simulations``), ``random``,
    ``greedy``, ``uct`` (``playouts`` random rollouts a move) and ``perfect``."""

    kind: str
    name: str
    model: str | None = None
    simulations: int = 100
    c_puct: float = 1.25
    temperature: float = 0.0
    temperature_moves: int = 0
    playouts: int = 400
    device: str = "auto"

    def build(self, game: Game, rng: np.random.Generator) -> Player:
        from zeroloop import players as P

        if self.kind == "random":
            return P.RandomPlayer(game, rng)
        if self.kind == "greedy":
            return P.GreedyPlayer(game, rng)
        if self.kind == "uct":
            return P.UCTPlayer(game, rng, playouts=self.playouts)
        if self.kind == "perfect":
            if game.name == "tictactoe":
                return P.PerfectTicTacToe(rng, game)
            if game.name == "connect4":
                return P.PerfectConnectFour(rng, game)
            raise ValueError(f"no perfect player for {game.name}")
        if self.kind == "mcts":
            from zeroloop.engine import load_or_init_net
            from zeroloop.nn import NetworkEvaluator
            from zeroloop.search import MoveSchedule, SearchConfig

            net, _ = load_or_init_net(game, self.model, 0)
            cfg = SearchConfig(simulations=self.simulations, c_puct=self.c_puct)
            return P.MCTSPlayer(game, NetworkEvaluator(game, net, self.device), cfg, rng=rng,
                                schedule=MoveSchedule(temperature=self.temperature,
                                                      temperature_moves=self.temperature_moves),
                                noise=False, name=self.name)
        raise ValueError(f"unknown player kind {self.kind!r}")


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

    @property
    def score(self) -> MatchScore:
        r = [g.result for g in self.games]
        return MatchScore(sum(x > 0 for x in r), sum(x == 0 for x in r), sum(x < 0 for x in r))


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
    from zeroloop.workers import default_workers

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xA7E4A]))
    openings = make_openings(game, opening_plies, games // 2, rng)
    n_workers = workers or default_workers()
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
