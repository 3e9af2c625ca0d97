"""Self-play throughput against the network limit, before and after continuous
batching, measured in one run in the same worker processes.

Every worker process plays the same seeded games twice:

* before: shards of ``--shard-games`` games, one shard at a time with all its
  games in flight (the batch drains as the shard's games end), the network
  run as trained (BatchNorm unfolded), no cache: how self-play ran before;
* after: continuous batching (``--in-flight`` games; a finished game's slot
  takes the next one at once), every network call exactly ``--eval-batch``
  positions through the inference net (BatchNorm folded), and a position
  cache of ``--cache`` entries: how the pipeline's self-play runs now.

Then the same processes run the inference net alone at ``--eval-batch`` on
real positions for as long. The yardstick is

    ratio = self-play simulations/s  /  network-only positions/s

(above 1 means the cache and terminal positions save more network calls than
search costs). Printed: both modes' simulations/s and their ratio, network-only
positions/s, the ratio, positions per network call, simulations per network
row, the cache's hit rate and the time split (network / tree / game rules).

    python benchmarks/selfplay_throughput.py [--workers 2] [--games 64] [--sims 64] [--model PATH|random]
        [--net KIND:AxB] [--device cpu|cuda] [--precision auto|fp32|bf16|fp16|int8]

``make bench`` runs it with the defaults (the shipped Connect Four model, 64
simulations and forced playouts as the default run searches, temperature 1
for 8 moves, kept from before the default's 20 so that figures stay comparable);
tests/test_benchmarks.py runs every benchmark with tiny settings so none can rot.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Spec:
    game: str
    model: str
    net: str
    sims: int
    games: int
    shard_games: int
    in_flight: int
    eval_batch: int
    cache: int
    seed: int
    device: str = "cpu"
    precision: str = "fp32"
    seconds: float = 0.0


def _net(spec: Spec):
    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn import NetConfig, PolicyValueNet

    game = make_game(spec.game)
    if spec.model != "random":
        from zeroloop.pipeline.data.storage import load_model

        net, game, _ = load_model(spec.model)
    else:
        torch.manual_seed(spec.seed)
        from net_sizes import parse_nets  # this folder's script: one way to write a net

        net = PolicyValueNet.for_game(game, NetConfig(**parse_nets(spec.net)[0]))
    return game, net


def selfplay_worker(spec: Spec, mode: str) -> dict:
    from zeroloop.engine.nn import FixedBatchEvaluator, NetworkEvaluator
    from zeroloop.engine.search import SearchConfig, SearchStats
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games

    game, net = _net(spec)
    cfg, schedule = SearchConfig(simulations=spec.sims), SelfplayConfig(temperature=1.0, temperature_moves=8)
    seeds = [np.random.SeedSequence([spec.seed, k]) for k in range(spec.games)]
    stats = SearchStats()
    t0 = time.perf_counter()
    if mode == "before":
        ev = NetworkEvaluator(game, net, spec.device, optimize=False)
        records = []
        for start in range(0, len(seeds), spec.shard_games):
            shard = seeds[start:start + spec.shard_games]
            records += play_selfplay_games(game, ev, cfg, schedule, shard, in_flight=len(shard), stats=stats)
        rows, hits, calls = stats.evaluations, 0, stats.calls
    else:
        ev = FixedBatchEvaluator(NetworkEvaluator(game, net, spec.device, precision=spec.precision),
                                 batch=spec.eval_batch, cache=spec.cache)
        records = play_selfplay_games(game, ev, cfg, schedule, seeds, in_flight=spec.in_flight, stats=stats)
        rows, hits, calls = ev.computed, ev.hits, ev.computed // spec.eval_batch
    wall = time.perf_counter() - t0
    return {"wall": wall, "sims": stats.simulations, "asked": stats.evaluations, "rows": rows, "hits": hits,
            "calls": calls, "moves": sum(len(r.actions) for r in records),
            "network": stats.network_s, "tree": stats.tree_s, "rules": stats.rules_s}


def selfplay_before(spec: Spec, tick=None) -> dict:
    return selfplay_worker(spec, "before")


def selfplay_after(spec: Spec, tick=None) -> dict:
    return selfplay_worker(spec, "after")


def network_worker(spec: Spec, tick=None) -> dict:
    from zeroloop.engine.games import random_line
    from zeroloop.engine.nn import NetworkEvaluator

    game, net = _net(spec)
    ev = NetworkEvaluator(game, net, spec.device, precision=spec.precision)
    rng = np.random.default_rng(spec.seed)
    states = [random_line(game, int(rng.integers(0, 20)), rng)[0] for _ in range(spec.eval_batch)]
    ev(states)  # warm-up
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < spec.seconds:
        ev(states)  # encode + forward, as self-play pays for
        n += len(states)
    return {"wall": time.perf_counter() - t0, "positions": n}


def _net_text(text: str) -> str:
    """``--net``: checked as benchmarks/net_sizes.py reads it (one net), kept as written."""
    from net_sizes import parse_nets

    try:
        nets = parse_nets(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("--nets", "--net", 1)) from None
    if len(nets) != 1:
        raise argparse.ArgumentTypeError(f"--net {text!r}: one net, e.g. 5x64, gpool:3x32 or mlp:3x512")
    return text


def _rate(results: list[dict], key: str) -> float:
    return sum(r[key] / r["wall"] for r in results)


def main() -> None:
    from zeroloop.engine.nn import NetConfig
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.runtime.workers import ProcessPool, default_workers

    d = NetConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--game", default="connect4")
    p.add_argument("--model", default=str(SHIPPED_DIR / "connect4.pt"),
                   help="model file (default: the shipped Connect Four model), or 'random'")
    p.add_argument("--workers", type=int, default=default_workers())
    p.add_argument("--games", type=int, default=250,
                   help="games per worker (default 250: the default run's 500 on 2 cores)")
    p.add_argument("--sims", type=int, default=64, help="simulations per move (the default run's 64)")
    p.add_argument("--shard-games", type=int, default=50, help="before: games per shard, all in flight")
    p.add_argument("--in-flight", type=int, default=128, help="after: games in flight per worker")
    p.add_argument("--eval-batch", type=int, default=32, help="after: positions per network call")
    p.add_argument("--cache", type=int, default=100_000, help="after: cached positions per worker")
    p.add_argument("--net", default=f"{d.blocks}x{d.channels}", type=_net_text,
                   help="with --model random: an untrained net, [KIND:]AxB as benchmarks/net_sizes.py "
                        "writes it (default %(default)s, the engine's NetConfig; e.g. gpool:3x48, mlp:3x512)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of network calls before measuring")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda[:N] or auto; on CUDA try --in-flight 1024 --eval-batch 512")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16", "int8"],
                   help="after and network only: the inference net's number format (default auto: what "
                        "runtime.precision: auto picks on this machine; fp16: CUDA only; int8: CPU only); "
                        "anything but fp32 is also measured against fp32 in the same run")
    a = p.parse_args()
    from zeroloop.engine.nn import resolve_device
    from zeroloop.engine.nn.inference import precision_name

    try:
        chosen = precision_name(a.precision, resolve_device(a.device))
    except ValueError as exc:
        p.error(str(exc))

    specs = [Spec(a.game, a.model, a.net, a.sims, a.games, a.shard_games, a.in_flight,
                  a.eval_batch, a.cache, seed, a.device, "fp32") for seed in range(a.workers)]
    precisions = ["fp32"] + ([chosen] if chosen != "fp32" else [])
    after: dict[str, list[dict]] = {}
    network: dict[str, list[dict]] = {}
    with ProcessPool(a.workers) as pool:  # the same processes (one torch thread each) for every phase
        def run(fn, tasks):
            return [f.result() for f in [pool.submit(fn, t) for t in tasks]]

        run(network_worker, [replace(s, seconds=a.warmup) for s in specs])
        before = run(selfplay_before, specs)
        for prec in precisions:
            after[prec] = run(selfplay_after, [replace(s, precision=prec) for s in specs])
        for prec in precisions:
            seconds = float(np.mean([r["wall"] for r in after[prec]]))
            network[prec] = run(network_worker, [replace(s, precision=prec, seconds=seconds) for s in specs])

    net = f"untrained {a.net}" if a.model == "random" else a.model
    from zeroloop.engine.nn.machine import describe, summary_line

    print("machine: " + summary_line(describe(a.device, "auto"), "auto"))  # what auto picks here
    print(f"game {a.game}, net {net}, {a.workers} worker process(es), 1 torch thread each, "
          f"{a.sims} sims/move, {a.games} games/worker, device {resolve_device(a.device)}, "
          f"after/network precision {a.precision} ({chosen})")
    phases = [("before", before)] + [(f"after {prec}", after[prec]) for prec in precisions]
    for name, res in phases:
        sims_s, rows_s = _rate(res, "sims"), _rate(res, "rows")
        calls, asked = sum(r["calls"] for r in res), sum(r["asked"] for r in res)
        tot = {k: sum(r[k] for r in res) for k in ("wall", "network", "tree", "rules")}
        other = tot["wall"] - tot["network"] - tot["tree"] - tot["rules"]
        print(f"self-play {name:11s}: {sims_s:9.0f} simulations/s  {rows_s:9.0f} network rows/s  "
              f"{_rate(res, 'moves'):7.1f} moves/s")
        print(f"  batch        : {sum(r['rows'] for r in res) / max(calls, 1):.1f} rows per network call; "
              f"{sum(r['sims'] for r in res) / max(sum(r['rows'] for r in res), 1):.2f} simulations per "
              f"network row; cache hits {sum(r['hits'] for r in res) / max(asked, 1):.1%} of lookups")
        print("  time split   : " + "  ".join(
            f"{k} {100 * v / tot['wall']:.1f}%" for k, v in
            (("network", tot["network"]), ("tree", tot["tree"]), ("game rules", tot["rules"]),
             ("other", other))))
    final = after[chosen]
    print(f"speed-up       : {_rate(final, 'sims') / _rate(before, 'sims'):.2f}x  "
          f"(after {chosen} over before, simulations/s)")
    if chosen != "fp32":
        print(f"precision      : {_rate(final, 'sims') / _rate(after['fp32'], 'sims'):.2f}x  "
              f"(self-play simulations/s, {chosen} over fp32, same run)")
    for prec in precisions:
        net_s = _rate(network[prec], "positions")
        print(f"network {prec:6s} : {net_s:9.0f} positions/s (inference net, batch {a.eval_batch}, "
              f"same processes); self-play {prec} over it: {_rate(after[prec], 'sims') / net_s:.3f}")


if __name__ == "__main__":
    main()
