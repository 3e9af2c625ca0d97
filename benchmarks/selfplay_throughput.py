"""Self-play throughput against the network limit, measured in one run.

Phase 1: every worker process plays self-play games with the Connect Four
model shipped with zeroloop (``--model random`` for an untrained net of
``--blocks`` x ``--channels``) and reports its simulations, evaluations and the
time split (network / tree / game rules).
Phase 2: the same processes, at the same batch size, run the network alone on
real positions for as long. The yardstick is

    ratio = self-play simulations/s  /  network-only positions/s

(1.0 would mean search costs nothing beyond the network calls it makes).

    python benchmarks/selfplay_throughput.py [--workers 2] [--games 64] [--sims 64] [--model PATH|random]

``make bench`` runs it with the defaults; tests/test_benchmarks.py runs every
benchmark with tiny settings so none can rot.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Spec:
    game: str
    model: str
    blocks: int
    channels: int
    sims: int
    games: int
    batch: int
    seed: int
    seconds: float = 0.0


def _net(spec: Spec):
    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetConfig, NetworkEvaluator, PolicyValueNet

    game = make_game(spec.game)
    if spec.model != "random":
        from zeroloop.pipeline.storage import load_model

        net, game, _ = load_model(spec.model)
    else:
        torch.manual_seed(spec.seed)
        net = PolicyValueNet.for_game(game, NetConfig(blocks=spec.blocks, channels=spec.channels))
    return game, NetworkEvaluator(game, net, "cpu")


def selfplay_worker(spec: Spec, tick=None) -> dict:
    from zeroloop.engine.search import MoveSchedule, SearchConfig, SearchStats
    from zeroloop.engine.selfplay import play_selfplay_games

    game, ev = _net(spec)
    stats = SearchStats()
    t0 = time.perf_counter()
    records = play_selfplay_games(
        game, ev, SearchConfig(simulations=spec.sims), MoveSchedule(temperature=1.0, temperature_moves=8),
        spec.games,
        rng=np.random.default_rng(spec.seed), parallel_games=spec.batch, stats=stats)
    wall = time.perf_counter() - t0
    return {"wall": wall, "sims": stats.simulations, "evals": stats.evaluations,
            "calls": stats.calls, "moves": sum(len(r.actions) for r in records),
            "network": stats.network_s, "tree": stats.tree_s, "rules": stats.rules_s}


def network_worker(spec: Spec, tick=None) -> dict:
    game, ev = _net(spec)
    rng = np.random.default_rng(spec.seed)
    states = []
    for _ in range(spec.batch):  # real mid-game positions
        s = game.initial_state()
        for _ in range(int(rng.integers(0, 20))):
            legal = np.flatnonzero(game.legal_mask(s))
            nxt = game.apply(s, int(rng.choice(legal)))
            if nxt.outcome is not None:
                break
            s = nxt
        states.append(s)
    ev(states)  # warm-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < spec.seconds:
        ev(states)  # encode + forward, as self-play pays for
        n += len(states)
    return {"wall": time.perf_counter() - t0, "positions": n}


def main() -> None:
    from zeroloop.engine.nn import NetConfig
    from zeroloop.pipeline.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.workers import ProcessPool, default_workers

    d = NetConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="connect4")
    p.add_argument("--workers", type=int, default=default_workers())
    p.add_argument("--games", type=int, default=64, help="games per worker")
    p.add_argument("--sims", type=int, default=64, help="simulations per move (the default run's 64)")
    p.add_argument("--model", default=str(SHIPPED_DIR / "connect4.pt"),
                   help="model file (default: the shipped Connect Four model), or 'random'")
    p.add_argument("--batch", type=int, default=64, help="games searched together per worker")
    p.add_argument("--blocks", type=int, default=d.blocks)
    p.add_argument("--channels", type=int, default=d.channels)
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of network calls before measuring")
    a = p.parse_args()

    specs = [Spec(a.game, a.model, a.blocks, a.channels, a.sims, a.games, a.batch, seed)
             for seed in range(a.workers)]
    with ProcessPool(a.workers) as pool:  # the same processes (one torch thread each) for both phases
        def run(fn, tasks):
            return [f.result() for f in [pool.submit(fn, t) for t in tasks]]

        run(network_worker, [Spec(**{**s.__dict__, "seconds": a.warmup}) for s in specs])
        sp = run(selfplay_worker, specs)
        seconds = float(np.mean([r["wall"] for r in sp]))
        nw = run(network_worker, [Spec(**{**s.__dict__, "seconds": seconds}) for s in specs])

    sims_s = sum(r["sims"] / r["wall"] for r in sp)
    moves_s = sum(r["moves"] / r["wall"] for r in sp)
    evals_s = sum(r["evals"] / r["wall"] for r in sp)
    net_s = sum(r["positions"] / r["wall"] for r in nw)
    tot = {k: sum(r[k] for r in sp) for k in ("wall", "network", "tree", "rules")}
    other = tot["wall"] - tot["network"] - tot["tree"] - tot["rules"]
    net = f"untrained {a.blocks}x{a.channels}" if a.model == "random" else a.model
    print(f"game {a.game}, net {net}, {a.workers} worker process(es), "
          f"1 torch thread each, batch {a.batch}, {a.sims} sims/move, {a.games} games/worker")
    print(f"self-play      : {sims_s:9.0f} simulations/s  {evals_s:9.0f} network evals/s  "
          f"{moves_s:7.1f} positions(moves)/s")
    print(f"network only   : {net_s:9.0f} positions/s (same batch, same processes)")
    print(f"ratio          : {sims_s / net_s:.3f}  (simulations/s over network-only positions/s)")
    print(f"evals ratio    : {evals_s / net_s:.3f}  (network evals/s in self-play over network-only)")
    calls = sum(r["calls"] for r in sp)
    print(f"mean batch     : {sum(r['evals'] for r in sp) / max(calls, 1):.1f} positions per network call; "
          f"{sum(r['sims'] for r in sp) / max(sum(r['evals'] for r in sp), 1):.2f} simulations "
          "per evaluation")
    print("time split     : " + "  ".join(
        f"{k} {100 * v / tot['wall']:.1f}%" for k, v in
        (("network", tot["network"]), ("tree", tot["tree"]), ("game rules", tot["rules"]),
         ("other", other))))


if __name__ == "__main__":
    main()
