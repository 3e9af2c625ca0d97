"""selfplay@g: games of the current best model against itself, as shards in data/gen_g/.

Shards are first written to a scratch directory named by a hash of the job
(settings, seed and the model's checksum). A killed run leaves its finished
shards there; the rerun keeps them and plays only the rest. When all shards
are done the directory is checked and moved into place in one rename.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

from zeroloop.config import Params
from zeroloop.search import MoveSchedule, SearchConfig
from zeroloop.selfplay import arrays_to_records
from zeroloop.selfplay_jobs import SelfplayJob, run_selfplay, shard_path
from zeroloop.stages.common import (
    data_dir,
    derive_seed,
    model_path,
    partial_dir,
    report_path,
    say,
    write_json,
)
from zeroloop.storage import file_sha256, load_shard
from zeroloop.tracking import Tracker


def search_config(p: Params) -> SearchConfig:
    m = p.mcts
    return SearchConfig(simulations=m.simulations, c_puct=m.c_puct, dirichlet_alpha=m.dirichlet_alpha,
                        dirichlet_epsilon=m.dirichlet_epsilon, leaves_per_game=m.leaves_per_game)


def run(p: Params, gen: int, prev: int) -> None:
    game = p.make_game()
    job = SelfplayJob(
        game=game.name, model=str(model_path(prev)), games=p.selfplay.games, search=search_config(p),
        schedule=MoveSchedule(temperature=p.selfplay.temperature,
                              temperature_moves=p.selfplay.temperature_moves),
        seed=derive_seed(p.seed, "selfplay", gen), shard_games=p.selfplay.shard_games,
        device=p.runtime.device)
    identity = job.identity()
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    scratch = partial_dir(gen, key)
    for stale in scratch.parent.glob(f"gen_{gen}-*"):
        if stale != scratch:
            shutil.rmtree(stale, ignore_errors=True)  # made with other settings: never mixed in
    t0 = time.perf_counter()
    shards, stats = run_selfplay(job, workers=p.runtime.workers or None, out_dir=scratch,
                                 meta={"generation": gen})
    wall = time.perf_counter() - t0

    wins = draws = losses = positions = 0
    files = {}
    samples = []
    for r in shards:
        path = shard_path(scratch, r.index)
        arrays, _ = load_shard(path)  # checks every shard once more before it is published
        res = arrays["results"]
        wins += int((res > 0).sum())
        draws += int((res == 0).sum())
        losses += int((res < 0).sum())
        positions += len(arrays["z"])
        files[path.name] = file_sha256(path)
        if len(samples) < 4:
            samples += [game.format_moves(rec.actions)
                        for rec in arrays_to_records(arrays)[:4 - len(samples)]]
    write_json(scratch / "manifest.json", {"generation": gen, "game": game.name, "identity": identity,
                                          "shards": files})
    out = data_dir(gen)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(scratch, out)
    games = wins + draws + losses
    summary = {
        "generation": gen, "games": games, "positions": positions,
        "mean_length": round(positions / max(games, 1), 2),
        "first_player_score": round((wins + draws / 2) / max(games, 1), 4),
        "draw_rate": round(draws / max(games, 1), 4),
        "simulations": stats.simulations,
        "simulations_per_s": round(stats.simulations / wall) if stats.simulations else None,
        "network_share": round(stats.network_s / max(stats.network_s + stats.tree_s + stats.rules_s, 1e-9),
                               3),
        "wall_s": round(wall, 1),
    }
    write_json(report_path(gen, "selfplay"), summary)
    with Tracker.open(p) as tr:
        tr.log_generation(gen, {f"selfplay/{k}": v for k, v in summary.items()
                                if k != "generation" and v is not None})
        tr.log_text(gen, "\n".join(samples) + "\n", f"selfplay_sample_games_gen{gen}.txt")
    say(f"selfplay@{gen}", f"{games} games, {positions} positions, {wall:.0f}s -> {out}")

