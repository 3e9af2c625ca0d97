"""Self-play split into shards over worker processes, with a progress bar.

A job is cut into shards of ``shard_games`` games; shard ``i`` is seeded from
``(seed, i)``, so the games do not depend on how many workers play them. With
an output directory each worker writes its finished shard at once (atomically),
and :func:`run_selfplay` skips shards already on disk whose metadata matches
the job, so a killed run resumes where it stopped and never mixes in games made
with other settings or another model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from zeroloop.engine.config import Annotated, at, check_fields
from zeroloop.engine.games import Game, make_game
from zeroloop.engine.nn.net import NetConfig
from zeroloop.engine.search import MoveSchedule, SearchConfig, SearchStats
from zeroloop.engine.selfplay import GameRecord, play_selfplay_games, records_to_arrays
from zeroloop.pipeline.storage import (
    DamagedFileError,
    atomic_write_bytes,
    file_sha256,
    read_shard_meta,
    save_shard,
)
from zeroloop.pipeline.workers import Tick, run_tasks


@dataclass(frozen=True, kw_only=True)
class SelfplayConfig:
    """Self-play settings per generation (params.yaml ``selfplay``).

    games: games per generation (AlphaZero: 25,000 per checkpoint in Go).
    temperature, temperature_moves: moves are sampled from the visit counts
        at ``temperature`` for the first ``temperature_moves`` plies, then the
        most-visited move is played (AlphaZero: 1.0 for 30 moves).
    shard_games: games per shard, the unit of parallel work, of seeding and of
        resuming a killed stage.
    """

    games: Annotated[int, at.Ge(1)] = 256
    temperature: Annotated[float, at.Interval(ge=0, le=10)] = 1.0
    temperature_moves: Annotated[int, at.Ge(0)] = 10
    shard_games: Annotated[int, at.Interval(ge=1, le=4096)] = 64

    def __post_init__(self) -> None:
        check_fields(self, "selfplay")

    @property
    def schedule(self) -> MoveSchedule:
        return MoveSchedule(temperature=self.temperature, temperature_moves=self.temperature_moves)


@dataclass(frozen=True)
class SelfplayJob:
    """Everything a worker needs (picklable). ``model=None``: a random net of
    shape ``net`` seeded from ``seed``."""

    game: str
    model: str | None
    games: int
    search: SearchConfig = field(default_factory=SearchConfig)
    schedule: MoveSchedule = field(default_factory=MoveSchedule)
    seed: int = 0
    shard_games: int = 64
    device: str = "auto"
    net: NetConfig | None = None

    def __post_init__(self) -> None:
        if self.games < 1:
            raise ValueError(f"games={self.games} must be >= 1")
        if self.shard_games < 1:
            raise ValueError(f"shard_games={self.shard_games} must be >= 1")
        if self.model and not Path(self.model).is_file():
            raise FileNotFoundError(f"{self.model}: no such model file")

    def shard_sizes(self) -> list[int]:
        full, rest = divmod(self.games, self.shard_games)
        return [self.shard_games] * full + ([rest] if rest else [])

    def identity(self) -> dict:
        """What a shard must have been made with to be reused: settings, seed
        and the model file's checksum."""
        return {
            "game": self.game, "games": self.games, "seed": self.seed, "shard_games": self.shard_games,
            "search": asdict(self.search), "schedule": asdict(self.schedule),
            "net": asdict(self.net) if self.net else None,
            "model_sha256": file_sha256(self.model) if self.model else None,
        }


@dataclass(frozen=True)
class _ShardTask:
    job: SelfplayJob
    index: int
    games: int
    out: str | None  # shard file to write, or None to return the records
    meta: dict | None


@dataclass
class ShardResult:
    index: int
    games: int
    positions: int
    stats: SearchStats
    records: list[GameRecord] | None  # only when not written to a file


_EVALUATORS: dict = {}  # per worker process: (model, device) -> evaluator


def _evaluator(job: SelfplayJob, game: Game):
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.pipeline.storage import load_or_init_net

    key = (job.model, job.model and Path(job.model).stat().st_mtime_ns, job.seed, job.net, job.device)
    if key not in _EVALUATORS:
        _EVALUATORS.clear()
        net, _ = load_or_init_net(game, job.model, job.seed, job.net)
        _EVALUATORS[key] = NetworkEvaluator(game, net, job.device)
    return _EVALUATORS[key]


def _play_shard(task: _ShardTask, tick: Tick) -> ShardResult:
    job = task.job
    game = make_game(job.game)
    stats = SearchStats()
    rng = np.random.default_rng(np.random.SeedSequence([job.seed, task.index]))
    records = play_selfplay_games(
        game, _evaluator(job, game), job.search, job.schedule, task.games, rng=rng,
        parallel_games=task.games, on_game=lambda _r: tick(1), stats=stats)
    positions = sum(len(r.actions) for r in records)
    if task.out is None:
        return ShardResult(task.index, len(records), positions, stats, records)
    save_shard(task.out, records_to_arrays(game, records), dict(task.meta, index=task.index))
    return ShardResult(task.index, len(records), positions, stats, None)


def shard_path(directory: str | Path, index: int) -> Path:
    return Path(directory) / f"shard_{index:05d}.zls"


def read_manifest(path: str | Path) -> dict:
    """A generation's manifest, checked against itself: it names exactly the
    shards its job makes (``identity``: games in shards of ``shard_games``),
    each with a checksum. A manifest that lost or gained an entry, or lacks a
    field, raises DamagedFileError naming the file and what is wrong."""
    from zeroloop.pipeline.storage import read_json

    data = read_json(path)
    try:
        shards, identity = data["shards"], data["identity"]
        games, per = int(identity["games"]), int(identity["shard_games"])
    except (KeyError, TypeError, ValueError):
        raise DamagedFileError(f"{path}: not a self-play manifest (needs shards and identity.games, "
                               "identity.shard_games)") from None
    if not isinstance(shards, dict) or not all(isinstance(v, str) for v in shards.values()):
        raise DamagedFileError(f"{path}: shards must map file names to checksums")
    expected = {shard_path(".", i).name for i in range(-(-games // per))}
    if set(shards) != expected:
        missing, extra = sorted(expected - set(shards)), sorted(set(shards) - expected)
        what = "; ".join(filter(None, [missing and f"missing {', '.join(missing)}",
                                       extra and f"unexpected {', '.join(extra)}"]))
        raise DamagedFileError(f"{path}: lists {len(shards)} shards, but {games} games in shards of {per} "
                               f"make {len(expected)} ({what})")
    return data


def finished_shards(job: SelfplayJob, directory: str | Path, identity: dict | None = None) -> set[int]:
    """Indices of shards in ``directory`` that are whole and were made by this
    exact job. Damaged or foreign shards are deleted."""
    identity = identity or job.identity()
    sizes = job.shard_sizes()
    done = set()
    for i in range(len(sizes)):
        path = shard_path(directory, i)
        if not path.exists():
            continue
        try:
            meta = read_shard_meta(path)
        except DamagedFileError:
            path.unlink()
            continue
        if meta.get("identity") == identity and meta.get("games") == sizes[i]:
            done.add(i)
        else:
            path.unlink()
    return done


def run_selfplay(job: SelfplayJob, *, workers: int | None = None, progress: bool = True,
                 out_dir: str | Path | None = None, meta: dict | None = None
                 ) -> tuple[list[ShardResult], SearchStats]:
    """Play the job's shards over ``workers`` processes (default one per core).

    Without ``out_dir`` the records come back in each :class:`ShardResult`.
    With it, every shard is written to ``out_dir/shard_NNNNN.zls`` as it
    finishes and shards already there from the same job are kept, not
    replayed (their results have ``stats`` zero). ``meta`` goes into each
    shard's header beside the job's identity.
    """
    sizes = job.shard_sizes()
    identity = job.identity()
    done: set[int] = set()
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        done = finished_shards(job, out_dir, identity)
    shard_meta = dict(meta or {}, identity=identity)
    tasks = [_ShardTask(job, i, n, str(shard_path(out_dir, i)) if out_dir is not None else None,
                        dict(shard_meta, games=n))
             for i, n in enumerate(sizes) if i not in done]
    remaining = sum(t.games for t in tasks)
    desc = f"self-play {job.game}" + (f" ({len(done)} shards kept)" if done else "")
    results = run_tasks(_play_shard, tasks, workers=workers, total=remaining, desc=desc,
                        unit="game", progress=progress)
    stats = SearchStats()
    for r in results:
        stats.merge(r.stats)
    kept = [ShardResult(i, sizes[i], -1, SearchStats(), None) for i in sorted(done)]
    return sorted(results + kept, key=lambda r: r.index), stats


def write_games_jsonl(path: str, game: Game, records: list[GameRecord]) -> None:
    """Games as JSON lines: moves in the game's notation and the result."""
    lines = [json.dumps({"game": game.name, "moves": game.format_moves(r.actions),
                         "result": r.result}) for r in records]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
