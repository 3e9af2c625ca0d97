"""Go's rules alone, and what they cost inside self-play, in one run.

1. Rules: seeded random games (a pass now and then) on each board size,
   moves per second of ``legal_mask`` + ``apply``, three ways: the numba
   kernels (what ``Go`` does on boards up to 10x10,
   :mod:`zeroloop.engine.games.go_kernels`), one pass over the chains in
   Python (a state without keys: larger boards) and a capture search per
   empty point (``Go._legal_point``, the reference). All must give the same
   masks, and the script says whether they did.
2. Self-play: ``--games`` games of a random net at ``--sims`` simulations on
   the last size, in this process, with the time split between the network,
   the tree and the rules.

Run it with the machine otherwise idle.

    python benchmarks/go_rules.py [--sizes 7,9] [--seconds 3] [--games 8] [--sims 64]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def reference_mask(game, state) -> np.ndarray:
    mask = np.zeros(game.num_actions, bool)
    if state.outcome is None:
        for a in range(game.pass_action):
            mask[a] = game._legal_point(state, a) is not None
        mask[game.pass_action] = True
    return mask


def rules_rate(game, seconds: float, seed: int, masker, keys: bool, keep: int = 2000) -> tuple[float, list]:
    """Moves per second of random play with ``masker`` finding the legal
    moves, from a start with Zobrist keys (the kernels) or without (Python);
    the first ``keep`` positions met with their masks."""
    from dataclasses import replace

    rng = np.random.default_rng(seed)
    start = game.initial_state() if keys else replace(game.initial_state(), keys=frozenset())
    moves, kept, t0 = 0, [], time.perf_counter()
    while time.perf_counter() - t0 < seconds or not moves:
        s = start
        while s.outcome is None:
            m = masker(s)
            if len(kept) < keep:
                kept.append((s, m))
            legal = np.flatnonzero(m[:-1])
            a = int(rng.choice(legal)) if len(legal) and rng.random() > 0.02 else game.pass_action
            s = game.apply(s, a)
            moves += 1
    return moves / (time.perf_counter() - t0), kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="7,9", help="board sizes, comma-separated")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of random play per size and method")
    ap.add_argument("--games", type=int, default=8, help="self-play games on the last size (0: skip)")
    ap.add_argument("--sims", type=int, default=64, help="self-play simulations per move")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn.machine import describe, summary_line

    torch.set_num_threads(1)
    print("machine: " + summary_line(describe("cpu", "fp32"), "fp32") + "; one process")
    sizes = [int(x) for x in a.sizes.split(",")]
    for n in sizes:
        game = make_game(f"go-{n}")
        kernels, kept = rules_rate(game, a.seconds, a.seed, game.legal_mask, keys=True)
        chains, kept_py = rules_rate(game, a.seconds, a.seed, game.legal_mask, keys=False)
        slow, _ = rules_rate(game, a.seconds, a.seed, lambda s, g=game: reference_mask(g, s), keys=False)
        same = all(np.array_equal(m, reference_mask(game, s)) for s, m in kept + kept_py)
        print(f"go-{n}: rules {kernels:,.0f} moves/s (numba kernels), "
              f"{chains:,.0f} moves/s (chains in Python), "
              f"{slow:,.0f} moves/s (a capture search a point); kernels/chains {kernels / chains:.2f}x, "
              f"chains/search {chains / slow:.2f}x; same legal moves: {'yes' if same else 'NO'}")
    if a.games:
        selfplay(make_game(f"go-{sizes[-1]}"), a.games, a.sims, a.seed)


def selfplay(game, games: int, sims: int, seed: int) -> None:
    import torch

    from zeroloop.engine.nn import NetConfig, NetworkEvaluator, PolicyValueNet
    from zeroloop.engine.search import SearchConfig, SearchStats
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games

    torch.manual_seed(seed)
    net = PolicyValueNet.for_game(game, NetConfig(blocks=4, channels=64, value_hidden=64))
    ev = NetworkEvaluator(game, net, "cpu", precision="fp32")
    stats = SearchStats()
    seeds = np.random.SeedSequence(seed).spawn(games)
    t0 = time.perf_counter()
    schedule = SelfplayConfig(temperature=1.0, temperature_moves=8)
    records = play_selfplay_games(game, ev, SearchConfig(simulations=sims), schedule, seeds, in_flight=games,
                                  stats=stats)
    wall = time.perf_counter() - t0
    moves = sum(len(r.actions) for r in records)
    parts = {"network": stats.network_s, "tree": stats.tree_s, "rules": stats.rules_s}
    total = sum(parts.values()) or 1.0
    split = "  ".join(f"{k} {100 * v / total:.0f}%" for k, v in parts.items())
    print(f"{game.name} self-play: {games} games, {moves} moves at {sims} simulations, 4x64 random net "
          f"in fp32: {stats.simulations / wall:,.0f} simulations/s; time split: {split}")


if __name__ == "__main__":
    main()
