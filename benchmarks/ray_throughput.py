"""Self-play throughput through Ray against the local worker processes, on the
same cores, in one run.

Both backends play the same seeded self-play job (the shipped Connect Four
model by default, the default run's 64 simulations and forced playouts,
temperature 1 for 8 moves)
through :func:`zeroloop.pipeline.data.shards.run_selfplay`, the call the self-play
stage makes, ``--rounds`` times each, alternating (local, ray, local, ray, ...)
so that a drift in the machine's speed hits both alike, after a local warm-up
(numba's kernels in their on-disk cache). A local call starts its worker
processes each time, as every local stage does. Ray's first call connects
(starting a private Ray instance, or joining ``--address``) and starts its
workers, as a stage on Ray does; its workers stay up for the later calls.
Printed: games/s per backend, Ray's first and later calls apart, the ratio
Ray / local overall and for the first calls (the issue's goal: at least 0.9),
and whether the two backends played the same games (they must).

    python benchmarks/ray_throughput.py [--workers N] [--games 200] [--sims 64] [--rounds 2]
        [--model PATH|random] [--address ''|auto|host:port]

tests/test_benchmarks.py runs it with tiny settings so it cannot rot.
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
import time


def play(job, backend, workers: int) -> tuple[float, str]:
    """Seconds for the job on the backend, and a digest of its games."""
    from zeroloop.pipeline.data.shards import run_selfplay
    from zeroloop.pipeline.runtime.backend import use_backend

    use_backend(backend)
    t0 = time.perf_counter()
    shards, _ = run_selfplay(job, workers=workers, progress=False)
    seconds = time.perf_counter() - t0
    games = [(r.actions, r.result) for s in shards for r in s.records]
    return seconds, hashlib.sha256(pickle.dumps(games)).hexdigest()


def main() -> None:
    from dataclasses import replace

    from zeroloop.engine.nn.net import NetConfig
    from zeroloop.engine.search import SearchConfig
    from zeroloop.engine.selfplay import SelfplayConfig
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.shards import SelfplayJob
    from zeroloop.pipeline.runtime.backend import Backend, local_cores

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--game", default="connect4")
    p.add_argument("--model", default=str(SHIPPED_DIR / "connect4.pt"),
                   help="model file, or 'random' (a random net)")
    p.add_argument("--workers", type=int, default=local_cores(), help="local processes = Ray tasks")
    p.add_argument("--games", type=int, default=200, help="games per timed call")
    p.add_argument("--sims", type=int, default=64, help="simulations per move (the default run's 64)")
    p.add_argument("--shard-games", type=int, default=50)
    p.add_argument("--in-flight", type=int, default=128, help="games each worker searches together")
    p.add_argument("--rounds", type=int, default=2, help="timed calls per backend, alternating")
    p.add_argument("--blocks", type=int, default=1, help="with --model random")
    p.add_argument("--channels", type=int, default=8, help="with --model random")
    p.add_argument("--address", default="", help="Ray: '' starts a private instance here; 'auto', host:port")
    a = p.parse_args()

    model = None if a.model == "random" else a.model
    net = NetConfig(blocks=a.blocks, channels=a.channels, value_hidden=a.channels) if model is None else None
    job = SelfplayJob(game=a.game, model=model, net=net, device="cpu",
                      search=SearchConfig(simulations=a.sims),
                      selfplay=SelfplayConfig(games=a.games, temperature_moves=8, shard_games=a.shard_games),
                      in_flight=a.in_flight, seed=11)
    warm = replace(job, selfplay=replace(job.selfplay, games=max(2, a.workers * 2), shard_games=1), seed=12)
    local, ray = Backend("local"), Backend("ray", a.address)
    play(warm, local, a.workers)  # numba's kernels compiled into its on-disk cache, files in the page cache

    times: dict[str, list[float]] = {"local": [], "ray": []}
    digests: dict[str, set[tuple[int, str]]] = {"local": set(), "ray": set()}
    for r in range(a.rounds):  # new games each round: warm workers' position caches must not replay them
        job_r = replace(job, seed=100 + r)
        for name, backend in (("local", local), ("ray", ray)):
            seconds, digest = play(job_r, backend, a.workers)
            times[name].append(seconds)
            digests[name].add((r, digest))
    rate = {k: a.games * len(v) / sum(v) for k, v in times.items()}
    cold, warm_ray = a.games / times["ray"][0], a.games * (a.rounds - 1) / max(sum(times["ray"][1:]), 1e-9)
    where = f"joining {a.address}" if a.address else "starting Ray on this machine"
    from zeroloop.engine.nn.machine import describe, summary_line

    print("machine: " + summary_line(describe("cpu", "auto"), "auto"))  # what auto picks here
    print(f"{a.game}, {a.sims} simulations, {a.games} games a call x {a.rounds} rounds, {a.workers} workers")
    for name, label in (("local", "local processes"), ("ray", "ray tasks      ")):
        calls = ", ".join(f"{t:.1f}" for t in times[name])
        print(f"{label}: {rate[name]:8.2f} games/s  (calls: {calls} s)")
    print("  local: every call starts its worker processes, as every local stage does")
    print(f"  ray, first call ({where}, workers starting): {cold:.2f} games/s")
    if a.rounds > 1:
        print(f"  ray, later calls (workers up): {warm_ray:.2f} games/s")
    print(f"ratio ray / local: {rate['ray'] / rate['local']:.3f}")
    first = times["local"][0] / times["ray"][0]
    print(f"ratio ray / local, first calls (a stage's single call, Ray's start-up included): {first:.3f}")
    same = digests["local"] == digests["ray"]
    print(f"same games on both backends: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit("the backends played different games")


if __name__ == "__main__":
    main()
