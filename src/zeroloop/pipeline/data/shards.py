"""Self-play split into shards over worker processes, with a progress bar.

A job is cut into shards of ``shard_games`` games; game ``k`` of shard ``i`` is
seeded from ``(seed, i, k)`` and the network is always called with
``eval_batch`` positions, so the games do not depend on how many workers play
them nor on how many games each keeps in flight. Each worker plays its share
of the shards together (continuous batching: a finished game's slot takes the
next game, of the same shard or the next); the games of shards left over once
every worker has the same number of whole shards are split evenly between
the workers (:func:`_assign`), so none idles while another plays a last
shard. With an output directory a shard
is written as soon as its last game ends (atomically),
and :func:`run_selfplay` skips shards already on disk whose metadata matches
the job, so a killed run resumes where it stopped and never mixes in games made
with other settings or another model.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from zeroloop.engine.games import Game, make_game
from zeroloop.engine.nn import FixedBatchEvaluator
from zeroloop.engine.nn.net import NetConfig
from zeroloop.engine.search import SearchConfig, SearchStats
from zeroloop.engine.selfplay import GameRecord, SelfplayConfig, play_selfplay_games, records_to_arrays
from zeroloop.pipeline.data.storage import (
    DamagedFileError,
    ShippedFile,
    atomic_write_bytes,
    file_sha256,
    read_shard_meta,
    save_shard,
)
from zeroloop.pipeline.runtime.backend import Tick, current_backend, parts_sent, send_part
from zeroloop.pipeline.runtime.workers import default_workers, run_tasks


@dataclass(frozen=True)
class SelfplayJob:
    """Everything a worker needs (picklable). ``model=None``: a random net of
    shape ``net`` seeded from ``seed``.

    Shard ``i``'s game ``k`` is seeded from ``(seed, i, k)``. ``in_flight``
    (games searched together per worker) and ``eval_cache`` (positions whose
    network answers a worker remembers) change speed, never the games.
    ``archive``: games (their moves) whose positions start a share
    ``selfplay.archive_starts`` of the games (Go-Exploit).
    """

    game: str
    model: str | ShippedFile | None  # a shipped file on a backend whose tasks have their own disks
    selfplay: SelfplayConfig
    search: SearchConfig = field(default_factory=SearchConfig)
    seed: int = 0
    device: str = "auto"
    net: NetConfig | None = None
    in_flight: int = 128
    eval_cache: int = 100_000
    precision: str = "fp32"
    archive: tuple[tuple[int, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.in_flight < 1 or self.eval_cache < 0:
            raise ValueError(f"in_flight={self.in_flight} must be >= 1, eval_cache={self.eval_cache} >= 0")
        if isinstance(self.model, str) and not Path(self.model).is_file():
            raise FileNotFoundError(f"{self.model}: no such model file")

    @property
    def games(self) -> int:
        return self.selfplay.games

    @property
    def shard_games(self) -> int:
        return self.selfplay.shard_games

    @property
    def eval_batch(self) -> int:
        return self.selfplay.eval_batch

    def _precision(self) -> str:
        from zeroloop.engine.nn import resolve_device
        from zeroloop.engine.nn.inference import precision_name

        return precision_name(self.precision, resolve_device(self.device))

    def shard_sizes(self) -> list[int]:
        full, rest = divmod(self.games, self.shard_games)
        return [self.shard_games] * full + ([rest] if rest else [])

    def archive_sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.archive, separators=(",", ":")).encode()).hexdigest()

    def identity(self) -> dict:
        """What a shard must have been made with to be reused: settings, seed
        and the model file's checksum."""
        s = self.selfplay
        return {
            "game": self.game, "games": self.games, "seed": self.seed, "shard_games": self.shard_games,
            "search": asdict(self.search), "schedule": asdict(s.schedule), "eval_batch": self.eval_batch,
            "net": asdict(self.net) if self.net else None,
            "model_sha256": (self.model.sha256 if isinstance(self.model, ShippedFile)
                             else file_sha256(self.model) if self.model else None),
            # a playout cap only when set, so that the identities of older shards still match
            **({"playout_cap": asdict(s.cap)} if s.cap else {}),
            **({"archive_starts": s.archive_starts, "archive_sha256": self.archive_sha256()}
               if s.archive_starts else {}),
            # as resolved on this machine; fp32 is left out, so that shards made before the key
            # existed are still reused
            **({"precision": p} if (p := self._precision()) != "fp32" else {}),
        }


@dataclass(frozen=True)
class _Shard:
    """A shard's games ``first .. first + games - 1`` (all of them, or a piece
    of a shard split between workers, whose records go back to the caller)."""

    index: int
    games: int
    out: str | None  # shard file to write, or None to return the records
    meta: dict | None
    first: int = 0


def _assign(todo: list[_Shard], workers: int) -> list[list[_Shard]]:
    """The shards each worker plays. Whole shards go round-robin while every
    worker gets one; the games of the shards left over (fewer than the
    workers) are split evenly between all of them, so no worker plays a whole
    shard more than another while the rest wait: 15 shards on 2 workers are
    7.5 shards each, not 8 and 7. A split shard's pieces come back as records
    and :func:`run_selfplay` writes the shard once all are in. Games are
    seeded by (shard, game), so the games are the same however they are
    split."""
    whole = len(todo) - len(todo) % workers
    share: list[list[_Shard]] = [list(todo[k:whole:workers]) for k in range(workers)]
    flat = [(shard, g) for shard in todo[whole:] for g in range(shard.games)]
    for k in range(workers):
        mine = flat[k * len(flat) // workers:(k + 1) * len(flat) // workers]
        for shard in {s.index: s for s, _ in mine}.values():
            games = [g for s, g in mine if s is shard]
            if len(games) == shard.games:
                share[k].append(shard)
            else:
                share[k].append(replace(shard, games=len(games), out=None, first=games[0]))
    return [s for s in share if s]


@dataclass(frozen=True)
class _WorkerTask:
    """One worker's shards, played together with continuous batching."""

    job: SelfplayJob
    shards: list[_Shard]


@dataclass
class ShardResult:
    index: int
    games: int
    positions: int
    records: list[GameRecord] | None  # only when not written to a file
    first: int = 0  # a piece of a shard split between workers: its first game


@dataclass
class _WorkerResult:
    shards: list[ShardResult]
    stats: SearchStats


_EVALUATORS: dict = {}  # per worker process: (model, ...) -> evaluator, its cache kept across tasks


def _evaluator(job: SelfplayJob, game: Game) -> FixedBatchEvaluator:
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.pipeline.data.storage import load_or_init_net

    stamp = job.model.sha256 if isinstance(job.model, ShippedFile) else (
        job.model and Path(job.model).stat().st_mtime_ns)
    key = (job.model, stamp, job.seed, job.net, job.device, job.eval_batch, job.eval_cache, job.precision)
    if key not in _EVALUATORS:
        _EVALUATORS.clear()
        net, _ = load_or_init_net(game, job.model, job.seed, job.net)
        ev = NetworkEvaluator(game, net, job.device, precision=job.precision)
        _EVALUATORS[key] = FixedBatchEvaluator(ev, batch=job.eval_batch, cache=job.eval_cache)
    return _EVALUATORS[key]


def _play_shards(task: _WorkerTask, tick: Tick) -> _WorkerResult:
    """Play the task's shards with ``job.in_flight`` games in flight; write each
    shard as soon as its last game ends, or, where the task has its own disk
    (Ray), send it to the caller then (:func:`send_part`). A task run again
    after its node died skips the shards its first attempt sent."""
    job = task.job
    sent = parts_sent(tick)
    shards = [shard for shard in task.shards if shard.index not in sent]
    stats = SearchStats()
    if not shards:
        return _WorkerResult([], stats)
    game = make_game(job.game)
    evaluator = _evaluator(job, game)
    before = (evaluator.hits, evaluator.computed)
    owner = [(k, g) for k, shard in enumerate(shards) for g in range(shard.games)]
    seeds = [np.random.SeedSequence([job.seed, shards[k].index, shards[k].first + g]) for k, g in owner]
    pending = {k: {} for k in range(len(shards))}  # shard -> {game: record} until it is whole
    results: list[ShardResult] = []

    def finished(i: int, record: GameRecord) -> None:
        k, g = owner[i]
        pending[k][g] = record
        tick(1)
        shard = shards[k]
        if len(pending[k]) == shard.games:
            whole = pending.pop(k)
            records = [whole[n] for n in range(shard.games)]
            positions = sum(len(r.actions) for r in records)
            if shard.out is None:
                result = ShardResult(shard.index, shard.games, positions, records, shard.first)
                if send_part(tick, shard.index, result):  # a task holds one piece of a shard at most
                    result = ShardResult(shard.index, shard.games, positions, None, shard.first)
                results.append(result)
                return
            save_shard(shard.out, records_to_arrays(game, records), dict(shard.meta, index=shard.index))
            results.append(ShardResult(shard.index, shard.games, positions, None))

    play_selfplay_games(game, evaluator, job.search, job.selfplay, seeds, in_flight=job.in_flight,
                        on_game=finished, stats=stats, archive=job.archive)
    stats.cache_hits += evaluator.hits - before[0]
    stats.network_rows += evaluator.computed - before[1]
    return _WorkerResult(results, stats)


def shard_path(directory: str | Path, index: int) -> Path:
    return Path(directory) / f"shard_{index:05d}.zls"


def read_manifest(path: str | Path) -> dict:
    """A generation's manifest, checked against itself: it names exactly the
    shards its job makes (``identity``: games in shards of ``shard_games``),
    each with a checksum. A manifest that lost or gained an entry, or lacks a
    field, raises DamagedFileError naming the file and what is wrong."""
    from zeroloop.pipeline.data.storage import read_json

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
    replayed (their ``positions`` is -1). ``meta`` goes into each
    shard's header beside the job's identity. On a backend whose tasks have
    their own disks (Ray), the model travels with the tasks and each shard
    comes back to be written here as it finishes: a node, or the head, that
    dies mid-stage costs only the shards it was playing.
    """
    sizes = job.shard_sizes()
    identity = job.identity()
    done: set[int] = set()
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        done = finished_shards(job, out_dir, identity)
    shard_meta = dict(meta or {}, identity=identity)
    local = current_backend().shares_files
    if not local and isinstance(job.model, str):
        job = replace(job, model=ShippedFile(job.model))
    todo = [_Shard(i, n, str(shard_path(out_dir, i)) if out_dir is not None and local else None,
                   dict(shard_meta, games=n))
            for i, n in enumerate(sizes) if i not in done]
    game = make_game(job.game)
    metas = {shard.index: shard.meta for shard in todo}
    got: dict[int, ShardResult] = {}  # shards back as records: from tasks with their own disks, or split
    pieces: dict[int, dict[int, ShardResult]] = {}  # a split shard's pieces by first game, until all are in

    def take(result: ShardResult) -> None:
        """A shard that came back as records (from a task with its own disk,
        as it finished or with its task's result; or all pieces of a split
        shard): written here, once."""
        if result.index in got or result.records is None:
            return
        if result.games < sizes[result.index]:  # a piece: the shard is whole once every piece is in
            have = pieces.setdefault(result.index, {})
            have[result.first] = result
            if sum(r.games for r in have.values()) < sizes[result.index]:
                return
            parts = [have[k] for k in sorted(have)]
            result = ShardResult(result.index, sizes[result.index], sum(r.positions for r in parts),
                                 [rec for r in parts for rec in r.records or []])
            del pieces[result.index]
        if out_dir is not None:
            save_shard(shard_path(out_dir, result.index), records_to_arrays(game, result.records),
                       dict(metas[result.index], index=result.index))
            result = ShardResult(result.index, result.games, result.positions, None)
        got[result.index] = result

    stats = SearchStats()
    results: dict[int, ShardResult] = {}
    for attempt in range(2):
        remaining = sum(s.games for s in todo)
        n_workers = max(1, min(workers or default_workers(), remaining))
        tasks = [_WorkerTask(job, share) for share in _assign(todo, n_workers)]
        desc = (f"self-play {job.game}" + (f" ({len(done)} shards kept)" if done else "")
                + (" (again)" if attempt else ""))
        parts = run_tasks(_play_shards, tasks, workers=n_workers, total=remaining, desc=desc,
                          unit="game", progress=progress, on_part=lambda key, result: take(result),
                          on_result=lambda k, part: [take(r) for r in part.shards])
        written = {shard.index for shard in todo if shard.out is not None}  # by the tasks themselves
        for part in parts:
            stats.merge(part.stats)
            results.update({r.index: r for r in part.shards if r.games == sizes[r.index]
                            and (r.records is not None or r.index in written)})
        results.update(got)
        # A shard a task says it sent (its records went ahead, to the counter) but that never
        # reached this process is played again: its games are seeded by its index, so it comes
        # out the same. Twice lost, or never reported at all, is a bug to hear about.
        lost = [shard for shard in todo if shard.index not in results]
        if not lost:
            break
        names = ", ".join(str(shard.index) for shard in lost[:5]) + (", ..." if len(lost) > 5 else "")
        if attempt:
            raise RuntimeError(f"self-play: shards {names} never came back from their tasks")
        print(f"self-play: {len(lost)} shard{'s' if len(lost) != 1 else ''} ({names}) finished on a worker "
              "but never reached this process; playing them again (the same games)",
              file=sys.stderr, flush=True)
        todo = lost
        pieces.clear()  # the next attempt may split its shards otherwise
    kept = [ShardResult(i, sizes[i], -1, None) for i in sorted(done)]
    return sorted([*results.values(), *kept], key=lambda r: r.index), stats


def write_games_jsonl(path: str, game: Game, records: list[GameRecord]) -> None:
    """Games as JSON lines: moves in the game's notation and the result."""
    lines = [json.dumps({"game": game.name, "moves": game.format_moves(r.actions),
                         "result": r.result}) for r in records]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode())
