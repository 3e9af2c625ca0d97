"""Self-play: many games advance together through one batched search."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games import Game, first_player_result
from zeroloop.engine.games.base import input_planes
from zeroloop.engine.search import (
    BatchedMCTS,
    Evaluator,
    MoveSchedule,
    SearchConfig,
    SearchStats,
    chosen_moves,
)
from zeroloop.engine.timing import PartTimer


@dataclass
class GameRecord:
    """One finished game.

    actions: ``[T]`` moves played. policies: ``[T, A]`` float32 visit
    distributions (the training targets). values: ``[T]`` root values from the
    side to move. result: +1/0/-1 from the first player's view. full: ``[T]``
    whether the move came from a full search (a training sample) or a fast one
    (:class:`PlayoutCap`); all full without a cap.
    """

    actions: list[int]
    policies: np.ndarray
    values: np.ndarray
    result: float
    full: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.full is None:
            self.full = np.ones(len(self.actions), np.bool_)


@dataclass(frozen=True)
class PlayoutCap:
    """Playout cap randomisation (KataGo, Wu 2019): each move is a full search
    with probability ``full_probability`` (the search's configured
    simulations, root noise, recorded for training), else a fast search of
    ``fast_simulations`` without noise, played but not recorded. More games
    (and more value targets per minute) for the same number of policy targets."""

    full_probability: float
    fast_simulations: int

    def __post_init__(self) -> None:
        if not 0.0 < self.full_probability <= 1.0 or self.fast_simulations < 1:
            raise ValueError(f"playout cap: full_probability={self.full_probability} must be in (0, 1] and "
                             f"fast_simulations={self.fast_simulations} >= 1")


@dataclass(frozen=True, kw_only=True)
class SelfplayConfig:
    """How self-play plays its games (params.yaml ``selfplay``).

    games: games per generation (AlphaZero: 25,000 per checkpoint in Go).
    temperature, temperature_moves: moves are sampled from the search's
        policy target (the visit counts; under Gumbel the improved policy) at
        ``temperature`` for the first ``temperature_moves`` plies, then the
        search's choice is played: the most-visited move (AlphaZero: 1.0 for
        30 moves), under Gumbel the sequential halving's winner.
    shard_games: games per shard, the unit of resuming a killed stage (a shard
        is written as soon as its games are done).
    eval_batch: positions per network call. A network's floating-point answer
        depends on the batch size it is computed at, so self-play always calls
        it with exactly this many positions (padding a short call): the games
        then do not depend on the worker count or on how many games a worker
        has in flight. 32 is near the network-only peak of the CPU it was
        chosen on (AMD EPYC Zen 4, 2 cores, avx512_bf16); a GPU wants more.
    full_search_probability, fast_simulations: playout cap randomisation
        (KataGo): a move is a full search (``mcts.simulations``, recorded for
        training) with this probability, else a fast search of
        ``fast_simulations``, played but not recorded. 1.0: every move is full.
    archive_starts: the share of games that start from a position drawn
        uniformly from an archive of positions earlier self-play visited (the
        pipeline's: the previous generation's games), as Go-Exploit does
        (Trudeau and Bowling, AAMAS 2023); the moves that lead there are
        replayed, not searched and not trained on. 0: every game from the start.
    """

    games: Annotated[int, at.Ge(1)] = 1500
    temperature: Annotated[float, at.Interval(ge=0, le=10)] = 1.0
    temperature_moves: Annotated[int, at.Ge(0)] = 20
    shard_games: Annotated[int, at.Interval(ge=1, le=4096)] = 100
    eval_batch: Annotated[int, at.Interval(ge=1, le=4096)] = 32
    full_search_probability: Annotated[float, at.Interval(gt=0, le=1)] = 1.0
    fast_simulations: Annotated[int, at.Interval(ge=1, le=100_000)] = 16
    archive_starts: Annotated[float, at.Interval(ge=0, le=1)] = 0.0

    def __post_init__(self) -> None:
        check_fields(self, "selfplay")

    @property
    def cap(self) -> PlayoutCap | None:
        if self.full_search_probability >= 1.0:
            return None
        return PlayoutCap(self.full_search_probability, self.fast_simulations)

    @property
    def schedule(self) -> MoveSchedule:
        return MoveSchedule(temperature=self.temperature, temperature_moves=self.temperature_moves)


@dataclass
class _Running:
    index: int
    rng: np.random.Generator
    actions: list[int] = field(default_factory=list)
    policies: list[np.ndarray] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    full: list[bool] = field(default_factory=list)


def play_selfplay_games(game: Game, evaluator: Evaluator, config: SearchConfig, selfplay: SelfplayConfig,
                        seeds: Sequence[np.random.SeedSequence], *, in_flight: int = 64,
                        on_game: Callable[[int, GameRecord], None] | None = None,
                        stats: SearchStats | None = None, timer: PartTimer | None = None,
                        archive: Sequence[Sequence[int]] = ()) -> list[GameRecord]:
    """Play one game of the evaluator against itself per seed, searched as
    ``config`` says and played as ``selfplay`` says (its move schedule, playout
    cap and Go-Exploit starts; its ``games``, ``shard_games`` and
    ``eval_batch`` are the pipeline's); the records come back in the order of
    ``seeds``.

    ``in_flight`` games share each search step (one evaluator call for all
    their leaves); when one ends, the next waiting game takes its slot at once,
    so batches stay full (continuous batching). Game ``i`` draws its root noise
    and its move choices from ``default_rng(seeds[i])`` alone, so with an
    evaluator whose answer for a position does not depend on the rest of its
    batch (:class:`~zeroloop.engine.nn.FixedBatchEvaluator`) a game does not
    depend on ``in_flight`` nor on the other games played with it.
    ``on_game(i, record)`` follows each finished game. With a playout cap
    each game draws, per move and from its own generator, whether the move is
    a full or a fast search.

    With ``selfplay.archive_starts`` p > 0 and an ``archive`` (games as their
    moves), a game draws from its own generator whether it starts from the
    archive (probability p), and if so which position: uniformly over every
    position the archive's games reached before a move (their first positions
    included). It replays the moves that lead there, kept in the record as the
    random plies are (not trained on), so rules with a history (Go's superko)
    see the same game. An empty archive draws nothing: the games of p = 0.

    ``timer`` (one of the run's own when none is given) is charged the time
    of each part of the run (:mod:`zeroloop.engine.timing`; ``on_game``
    counts as records); give the evaluator the same one to split its call
    into encoding, cache, batching and network. ``stats`` gets the search's
    counts and the coarse split of this run's parts. The games are the same
    with a timer or without.
    """
    if not seeds:
        return []
    timer = timer if timer is not None else PartTimer()
    timer.start()
    before = dict(timer.seconds)
    schedule, cap = selfplay.schedule, selfplay.cap
    archive_p = selfplay.archive_starts
    # position k of the archive is game j's ply k - ends[j], ends[j] <= k < ends[j + 1]
    ends = np.concatenate([[0], np.cumsum([len(a) for a in archive] if archive_p else [], dtype=np.int64)])
    slots = min(in_flight, len(seeds))
    mcts = BatchedMCTS(game, evaluator, config, slots, rng=np.random.default_rng(seeds[0]), timer=timer)
    timer.lap("tree")
    running: dict[int, _Running] = {}
    done: dict[int, GameRecord] = {}
    waiting = iter(range(len(seeds)))

    def start(slot: int) -> None:
        i = next(waiting, None)
        if i is None:
            return
        rng = np.random.default_rng(seeds[i])
        rec = _Running(i, rng)
        state = game.initial_state()

        def unsearched(action: int) -> None:  # a move played before the game's first search
            nonlocal state
            legal = game.legal_mask(state)
            rec.actions.append(action)
            rec.policies.append(np.where(legal, np.float32(1 / legal.sum()), np.float32(0)))
            rec.values.append(0.0)
            rec.full.append(False)
            state = game.apply(state, action)

        if ends[-1] and rng.random() < archive_p:
            k = int(rng.integers(ends[-1]))  # the k-th archived position
            j = int(np.searchsorted(ends, k, side="right")) - 1
            for action in archive[j][:k - ends[j]]:
                unsearched(int(action))
        timer.lap("rules")
        mcts.set_root(slot, state, rng=rng)
        running[slot] = rec
        timer.lap("tree")

    for slot in range(slots):
        start(slot)
    while running:
        order = sorted(running)
        if cap is None:
            steps = [(order, True, None)]
        else:
            full = {slot: bool(running[slot].rng.random() < cap.full_probability) for slot in order}
            steps = [([s for s in order if full[s]], True, None),
                     ([s for s in order if not full[s]], False, cap.fast_simulations)]
        finished = []
        for group, is_full, sims in steps:
            if not group:
                continue
            res = mcts.search(group, add_noise=is_full, simulations=sims)
            # sampled from the policy target (PUCT: the visits; Gumbel: the improved policy) for the
            # schedule's plies, then the search's choice (the most visited; the halving's winner)
            actions = chosen_moves(res, [mcts.root_state(slot).ply for slot in group],
                                   [schedule] * len(group),
                                   [running[slot].rng for slot in group])
            timer.lap("move choice")
            for j, (slot, action) in enumerate(zip(group, actions)):
                rec = running[slot]
                rec.actions.append(action)
                rec.policies.append(res.policy[j].astype(np.float32))
                rec.values.append(float(res.value[j]))
                rec.full.append(is_full)
                timer.lap("records")
                new = mcts.advance(slot, action)  # charges its rules and tree
                if new.outcome is not None:
                    finished.append((slot, new))
        for slot, new in sorted(finished):
            rec = running.pop(slot)
            record = GameRecord(rec.actions, np.stack(rec.policies), np.asarray(rec.values, np.float32),
                                first_player_result(new), np.asarray(rec.full, np.bool_))
            done[rec.index] = record
            if on_game is not None:
                on_game(rec.index, record)
            timer.lap("records")
            start(slot)
    if stats is not None:
        stats.merge(mcts.stats)
        stats.charge({part: timer.seconds[part] - before[part] for part in before})
    return [done[i] for i in range(len(seeds))]


def records_to_arrays(game: Game, records: list[GameRecord]) -> dict[str, np.ndarray]:
    """Games as compact training arrays, one row per position (``N`` in all).

    planes: ``[N, ceil(P*H*W/8)]`` uint8, the binary input planes bit-packed.
    policy: ``[N, A]`` float16 visit distributions. z: ``[N]`` int8 final
    result from the side to move. value: ``[N]`` float16 root values.
    actions: ``[N]`` int16 moves played. full (only when some position is
    not a training sample): ``[N]`` bool, whether the position came from a full
    search (:class:`PlayoutCap`). lengths / results: ``[G]`` per game
    (results from the first player's view).
    """
    planes, z = [], []
    for r in records:
        state, states = game.initial_state(), []
        for a in r.actions:
            states.append(state)
            state = game.apply(state, a)
        x = game.encode(states)  # [T, P, H, W], all 0/1
        planes.append(np.packbits(x.reshape(len(states), -1).astype(np.uint8), axis=1))
        z.extend(r.result if s.first_to_move else -r.result for s in states)
    A = game.num_actions
    full = np.concatenate([r.full for r in records]) if records else np.zeros(0, np.bool_)
    # written only when some position is not a training sample: shards without a cap stay as they were
    extra = {} if full.all() else {"full": full}
    return {**extra,
        "planes": np.concatenate(planes) if planes else np.zeros((0, 0), np.uint8),
        "policy": (np.concatenate([r.policies for r in records]) if records
                   else np.zeros((0, A), np.float32)).astype(np.float16),
        "z": np.asarray(z, np.int8),
        "value": (np.concatenate([r.values for r in records]) if records
                  else np.zeros(0, np.float32)).astype(np.float16),
        "actions": np.asarray([a for r in records for a in r.actions], np.int16),

        "lengths": np.asarray([len(r.actions) for r in records], np.int32),
        "results": np.asarray([r.result for r in records], np.int8),
    }


def unpack_planes(packed: np.ndarray, game: Game) -> np.ndarray:
    """Inverse of the packing in :func:`records_to_arrays`: ``[N, P, H, W]`` float32."""
    n, planes = packed.shape[0], input_planes(game)
    size = planes * game.rows * game.cols
    bits = np.unpackbits(packed, axis=1, count=size) if n else np.zeros((0, size), np.uint8)
    return bits.reshape(n, planes, game.rows, game.cols).astype(np.float32)


def arrays_to_records(arrays: dict[str, np.ndarray]) -> list[GameRecord]:
    """The games stored in a shard (policies and values as stored)."""
    out, start = [], 0
    for length, result in zip(arrays["lengths"].tolist(), arrays["results"].tolist()):
        end = start + length
        full = arrays["full"][start:end] if "full" in arrays else None  # shards before the playout cap
        out.append(GameRecord(arrays["actions"][start:end].tolist(),
                              arrays["policy"][start:end].astype(np.float32),
                              arrays["value"][start:end].astype(np.float32), float(result), full))
        start = end
    return out
