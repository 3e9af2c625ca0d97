"""The generation steps: init, self-play, training and the gate.

Each step reads its inputs from a :class:`~zeroloop.pipeline.data.layout.Layout`,
calls the library and writes its outputs there (atomically), returning a
summary. The DVC stages wrap them with MLflow logging; a tuning trial runs the
same steps under a temporary root, so there is one training loop.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

from zeroloop.engine.arena import MatchResult
from zeroloop.engine.rating import gate_decision, paired_interval, pentanomial
from zeroloop.engine.selfplay import arrays_to_records
from zeroloop.pipeline.data.layout import Layout, derive_seed
from zeroloop.pipeline.data.shards import SelfplayJob, read_manifest, run_selfplay, shard_path
from zeroloop.pipeline.data.storage import (
    DamagedFileError,
    atomic_write_bytes,
    file_sha256,
    load_model,
    load_shard,
    read_json,
    save_model,
    write_json,
)
from zeroloop.pipeline.matches import model_player, play_match
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.runtime.process import machine, process_clock


def init_step(p: Params, layout: Layout) -> dict:
    """Generation 0: a randomly initialised network (as the best model, and a
    byte copy as its candidate, so that every generation has both files the
    catalogue lists) and an empty replay window."""
    import torch

    from zeroloop.engine.nn import PolicyValueNet

    game = p.make_game()
    torch.manual_seed(derive_seed(p.seed, "init"))
    net = PolicyValueNet.for_game(game, p.net.config())
    save_model(layout.model(0), net, game, meta={"generation": 0, "origin": 0})
    atomic_write_bytes(layout.model(0, "candidate"), layout.model(0).read_bytes())
    write_json(layout.replay_manifest(0), {"generation": 0, "window": []})
    return {"weights": sum(t.numel() for t in net.parameters())}


def selfplay_job(p: Params, model: str | None, seed: int,
                 archive: tuple[tuple[int, ...], ...] = ()) -> SelfplayJob:
    """Self-play as params.yaml sets it (``mcts``, ``selfplay``, ``runtime.device`` and ``precision``)."""
    r = p.runtime
    return SelfplayJob(game=p.game, model=model, selfplay=p.selfplay.config(), search=p.mcts.config(),
                       seed=seed, device=r.device, in_flight=r.games_in_flight, eval_cache=r.eval_cache,
                       precision=r.precision, archive=archive)


def start_archive(p: Params, layout: Layout, prev: int) -> tuple[tuple[int, ...], ...]:
    """Go-Exploit's archive for the games after generation ``prev``: the moves
    of generation ``prev``'s own games (the newest in its replay manifest, each
    shard checked against its checksum); none after generation 0, nor when
    ``selfplay.archive_starts`` is 0."""
    if not p.selfplay.archive_starts:
        return ()
    window = read_json(layout.replay_manifest(prev))["window"]
    if not window or window[0]["generation"] != prev:
        return ()
    return tuple(tuple(rec.actions) for path in checked_shards(window[:1])
                 for rec in arrays_to_records(load_shard(path)[0]))


def selfplay_step(p: Params, layout: Layout, gen: int, prev: int, *, progress: bool = True
                  ) -> tuple[dict, list[str]]:
    """Games of generation ``prev``'s best model against itself, as shards in
    ``layout.data(gen)``: the summary and a few games in notation.

    Shards are first written to a scratch directory named by a hash of the job
    (settings, seed and the model's checksum). A killed run leaves its finished
    shards there; the rerun keeps them and plays only the rest. When all shards
    are done the directory is checked and moved into place in one rename.
    """
    game = p.make_game()
    job = selfplay_job(p, str(layout.model(prev)), derive_seed(p.seed, "selfplay", gen),
                       start_archive(p, layout, prev))
    identity = job.identity()
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    scratch = layout.partial(gen, key)
    for stale in scratch.parent.glob(f"gen_{gen}-*"):
        if stale != scratch:
            shutil.rmtree(stale, ignore_errors=True)  # made with other settings: never mixed in
    t0 = time.perf_counter()
    shards, stats = run_selfplay(job, workers=p.runtime.workers or None, out_dir=scratch,
                                 meta={"generation": gen}, progress=progress)
    wall = time.perf_counter() - t0

    wins = draws = losses = positions = trained = 0
    files = {}
    samples: list[str] = []
    for r in shards:
        path = shard_path(scratch, r.index)
        arrays, _ = load_shard(path)  # checks every shard once more before it is published
        res = arrays["results"]
        wins += int((res > 0).sum())
        draws += int((res == 0).sum())
        losses += int((res < 0).sum())
        positions += len(arrays["z"])
        trained += int(arrays["full"].sum()) if "full" in arrays else len(arrays["z"])
        files[path.name] = file_sha256(path)
        if len(samples) < 4:
            samples += [game.format_moves(rec.actions)
                        for rec in arrays_to_records(arrays)[:4 - len(samples)]]
    write_json(scratch / "manifest.json", {"generation": gen, "game": game.name, "identity": identity,
                                          "shards": files})
    out = layout.data(gen)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(scratch, out)
    games = wins + draws + losses
    busy = stats.network_s + stats.tree_s + stats.rules_s
    summary = {
        "generation": gen, "games": games, "positions": positions, "training_positions": trained,
        "mean_length": round(positions / max(games, 1), 2),
        "first_player_score": round((wins + draws / 2) / max(games, 1), 4),
        "draw_rate": round(draws / max(games, 1), 4),
        "simulations": stats.simulations,
        "simulations_per_s": round(stats.simulations / wall) if stats.simulations else None,
        "network_share": round(stats.network_s / max(busy, 1e-9), 3),
        "wall_s": round(wall, 1), **process_clock(),
        "machine": machine(p.runtime.device, p.runtime.precision),
    }
    write_json(layout.report(gen, "selfplay"), summary)
    return summary, samples


def replay_window(p: Params, layout: Layout, gen: int, prev: int) -> list[dict]:
    """This generation's shards plus the previous window, cut to
    ``train.replay_generations`` generations. The window is chained through
    small manifests (data/replay/gen_g.json lists the shards of the window and
    their checksums), so a generation depends on its predecessor's manifest
    rather than on a variable number of directories."""
    newest = {"generation": gen, "dir": str(layout.data(gen)),
              "shards": read_manifest(layout.data(gen) / "manifest.json")["shards"]}
    older = read_json(layout.replay_manifest(prev))["window"]
    return [newest] + older[:p.train.replay_generations - 1]


def checked_shards(entries: list[dict]) -> list[str]:
    """The window's shard paths, each checked against its manifest checksum."""
    paths = []
    for e in entries:
        for name, digest in sorted(e["shards"].items()):
            path = f"{e['dir']}/{name}"
            try:
                ok = file_sha256(path) == digest
            except FileNotFoundError:
                raise FileNotFoundError(f"{path}: shard of the replay window is missing") from None
            if not ok:
                raise DamagedFileError(f"{path}: does not match the checksum recorded in its manifest")
            paths.append(path)
    return paths


def train_step(p: Params, layout: Layout, gen: int, prev: int, *, logger=False, progress: bool = True
               ) -> dict:
    """A candidate trained on the replay window from generation ``prev``'s best
    model; ``logger`` is Lightning's (False: none)."""
    from zeroloop.pipeline.training.module import fit_network
    from zeroloop.pipeline.training.replay import load_replay

    game = p.make_game()
    entries = replay_window(p, layout, gen, prev)
    cfg = p.train.config()
    net, _, meta = load_model(layout.model(prev), game)
    data = load_replay(game, checked_shards(entries))
    occurrences = len(data)
    if cfg.dedup:
        data = data.deduplicated()
    t0 = time.perf_counter()
    losses = fit_network(net, game, data, cfg, seed=derive_seed(p.seed, "train", gen),
                         device=p.runtime.device, logger=logger, progress=progress)
    wall = time.perf_counter() - t0
    save_model(layout.model(gen, "candidate"), net, game,
               meta={"generation": gen, "origin": gen, "trained_from": meta.get("origin", prev)})
    summary = {"generation": gen, "samples": len(data), "positions_played": occurrences,
               "trained_from": meta.get("origin", prev),
               "window": [e["generation"] for e in entries], "lr": cfg.lr,
               "value_q_weight": cfg.value_q_weight, "wall_s": round(wall, 1)}
    summary.update({k.replace("_epoch", "").replace("/", "_"): round(v, 5) for k, v in losses.items()})
    summary.update(process_clock())
    write_json(layout.report(gen, "train"), summary)
    write_json(layout.replay_manifest(gen), {"generation": gen, "window": entries})
    return summary


def gate_step(p: Params, layout: Layout, gen: int, prev: int, *, progress: bool = True
              ) -> tuple[dict, MatchResult]:
    """The candidate against the best model; it becomes the best only when it
    scores at least ``gate.threshold`` (wins + half the draws), or, with
    ``gate.sprt.enabled``, when the sequential test (its hypotheses centred on
    the threshold) accepts it before the games run out. Writes the new
    best (a byte copy of the winner, so its checksum shows which model it is),
    the result and every game (for the viewer)."""
    game = p.make_game()
    cand, best = layout.model(gen, "candidate"), layout.model(prev)
    _, _, best_meta = load_model(best, game)  # fail early, naming a damaged file
    load_model(cand, game)
    origin = best_meta.get("origin", prev)
    g = p.gate
    sprt = p.sprt()
    t0 = time.perf_counter()
    match = play_match(game, model_player(p, str(cand), f"gen{gen}", g),
                       model_player(p, str(best), f"gen{origin}", g), games=g.games,
                       opening_plies=g.opening_plies, seed=derive_seed(p.seed, "gate", gen),
                       workers=p.runtime.workers or None, sprt=sprt, round_games=g.sprt.round_games,
                       desc=f"gate@{gen}", progress=progress)
    score = match.score
    pairs = match.pair_scores()
    verdict = match.verdict  # play_match's last look at the test (None without one)
    accepted = gate_decision(score, g.threshold, verdict)
    atomic_write_bytes(layout.model(gen), (cand if accepted else best).read_bytes())
    lo, hi = score.interval(0.95)
    pair_lo, pair_hi = paired_interval(pairs)
    result = {
        "generation": gen, "candidate": f"gen{gen}", "opponent": f"gen{origin}",
        "accepted": int(accepted), "best_origin": gen if accepted else origin,
        "score": round(score.score, 4), "ci95_low": round(lo, 4), "ci95_high": round(hi, 4),
        "pair_ci95_low": round(pair_lo, 4), "pair_ci95_high": round(pair_hi, 4),
        "threshold": g.threshold, "wins": score.wins, "draws": score.draws, "losses": score.losses,
        "games": score.games, "elo_diff": round(score.elo_diff, 1),
        "sprt": verdict or "off", "pairs": pentanomial(pairs),
        "stopped_early": int(match.stopped_early is not None), "simulations": g.simulations,
        "wall_s": round(time.perf_counter() - t0, 1), **process_clock(),
        "machine": machine(p.runtime.device, p.runtime.precision),
    }
    write_json(layout.report(gen, "gate"), result)
    # every game, for the viewer (`zeroloop serve`): moves from the start, opening included
    write_json(layout.report(gen, "gate_games"), {
        "game": game.name, "a": f"gen{gen}", "b": f"gen{origin}",
        "games": [{"moves": game.format_moves(r.actions), "a_first": r.a_first, "result": r.result}
                  for r in match.games]})
    return result, match
