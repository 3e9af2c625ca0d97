"""Self-play jobs split over worker processes, with a progress bar."""

from __future__ import annotations

import json
import queue as queue_mod
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from zeroloop.games import Game, make_game
from zeroloop.search import MoveSchedule, SearchConfig, SearchStats
from zeroloop.selfplay import GameRecord, play_selfplay_games
from zeroloop.storage import atomic_write_bytes
from zeroloop.workers import ProcessPool, default_workers


@dataclass(frozen=True)
class SelfplayJob:
    """Everything a worker needs (picklable). ``model=None``: random net from ``seed``."""

    game: str
    model: str | None
    games: int
    sims: int = 100
    seed: int = 0
    parallel_games: int = 64
    temperature: float = 1.0
    temperature_moves: int = 10
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.games < 1:
            raise ValueError(f"games={self.games} must be >= 1")
        if self.model and not Path(self.model).is_file():
            raise FileNotFoundError(f"{self.model}: no such model file")


@dataclass(frozen=True)
class _Chunk:
    job: SelfplayJob
    games: int
    seed: np.random.SeedSequence
    progress: object = None  # a queue proxy, or None


def _play_chunk(chunk: _Chunk) -> tuple[list[GameRecord], SearchStats]:
    from zeroloop.engine import load_or_init_net
    from zeroloop.nn import NetworkEvaluator

    job = chunk.job
    game = make_game(job.game)
    net, game = load_or_init_net(game, job.model, job.seed)
    stats = SearchStats()
    on_game = (lambda _r: chunk.progress.put(1)) if chunk.progress is not None else None
    records = play_selfplay_games(
        game, NetworkEvaluator(game, net, job.device), SearchConfig(simulations=job.sims),
        MoveSchedule(temperature=job.temperature, temperature_moves=job.temperature_moves),
        chunk.games, rng=np.random.default_rng(chunk.seed), parallel_games=job.parallel_games,
        on_game=on_game, stats=stats)
    return records, stats


def run_selfplay(job: SelfplayJob, workers: int | None = None,
                 progress: bool = True) -> tuple[list[GameRecord], SearchStats]:
    """Play ``job.games`` games split evenly over ``workers`` processes
    (default: one per core). Results depend on (seed, workers) only."""
    n = min(workers or default_workers(), job.games)
    sizes = [job.games // n + (i < job.games % n) for i in range(n)]
    seeds = np.random.SeedSequence(job.seed).spawn(n)
    bar = tqdm(total=job.games, desc=f"self-play {job.game}", unit="game", disable=not progress)
    stats = SearchStats()
    records: list[GameRecord] = []
    if n == 1:
        chunk = _Chunk(job, sizes[0], seeds[0], None)
        recs, st = _play_chunk(chunk)
        bar.update(len(recs))
        parts = [(recs, st)]
    else:
        import multiprocessing as mp

        with mp.get_context("spawn").Manager() as manager, ProcessPool(n) as pool:
            q = manager.Queue()
            futures = pool.submit_all(_play_chunk, [_Chunk(job, k, s, q) for k, s in zip(sizes, seeds)])
            while not all(f.done() for f in futures):
                try:
                    bar.update(q.get(timeout=0.2))
                except queue_mod.Empty:
                    pass
            parts = [f.result() for f in futures]
            bar.update(job.games - bar.n)
    bar.close()
    for recs, st in parts:
        records.extend(recs)
        stats.merge(st)
    return records, stats


def write_games_jsonl(path: str, game: Game, records: list[GameRecord]) -> None:
    """Games as JSON lines: moves in the game's notation and the result."""
    lines = [json.dumps({"game": game.name, "moves": game.format_moves(r.actions),
                         "result": r.result}) for r in records]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
