"""Rollout UCT, the evaluation's baseline opponent, three ways in one run: its
tree of Python nodes with random playouts through the ``Game`` protocol
(``legal_mask`` + ``apply``, a state per move); the same tree with the
k-in-a-row games' own ``random_playout`` loop; and, where the game has one
(Connect Four), the whole search as a numba kernel (``game.uct_visits``).

Each plays the same match (a model searched as the evaluate stage searches
it, against ``uct<playouts>``) in this one process, from the same seed; all
three draw the same random numbers, so the games must come out move for move
the same, and the script says whether they did. Printed: the machine, the
match's wall time each way and the ratios, and the time per UCT move. Run it
with the machine otherwise idle.

    python benchmarks/rollout_uct.py [--game connect4] [--games 10] [--playouts 1000] [--sims 200]
        [--model PATH] [--precision auto]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    from zeroloop.engine.nn.inference import PRECISIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--game", default="connect4", help="a k-in-a-row game (connect4, tictactoe, gomoku...)")
    ap.add_argument("--model", default="", help="model file (default: the shipped model of --game, else a "
                    "random net)")
    ap.add_argument("--games", type=int, default=10, help="games (even: each opening with both colours)")
    ap.add_argument("--playouts", type=int, default=1000, help="UCT playouts a move (evaluate.uct_playouts)")
    ap.add_argument("--sims", type=int, default=200, help="the model's simulations per move")
    ap.add_argument("--precision", default="auto", choices=PRECISIONS)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import numpy as np
    import torch

    import zeroloop.engine.players as players
    import zeroloop.engine.search.uct as uct
    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn.machine import describe, summary_line
    from zeroloop.engine.search import SearchConfig
    from zeroloop.engine.search.rollout import generic_rollout, random_rollout
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.matches import PlayerSpec, play_match

    torch.set_num_threads(1)
    game = make_game(a.game)
    if getattr(game, "random_playout", None) is None:
        ap.error(f"{game.name} has no fast random_playout: both ways would be the same")
    model = a.model or (str(SHIPPED_DIR / f"{game.name}.pt") if (SHIPPED_DIR / f"{game.name}.pt").exists()
                        else None)
    print("machine: " + summary_line(describe("cpu", a.precision), a.precision))
    me = PlayerSpec("mcts", "model", model=model, search=SearchConfig(simulations=a.sims), device="cpu",
                    precision=a.precision)
    opp = PlayerSpec("uct", f"uct{a.playouts}", playouts=a.playouts)
    # warm-up: the model's first load (quantising, compiling the search kernels) is not timed
    play_match(game, me, PlayerSpec("uct", "uct8", playouts=8), games=2, opening_plies=2, seed=a.seed + 1,
               workers=1, progress=False)
    ways = {"generic playouts": (uct.generic_uct_search, generic_rollout),
            "fast playouts": (uct.generic_uct_search, random_rollout)}
    if getattr(game, "uct_visits", None) is not None:
        # the kernel's first call compiles or loads it: not timed
        game.uct_visits(game.initial_state(), 2, 1.4, np.random.default_rng(0))
        ways["UCT kernel"] = (uct.uct_search, random_rollout)
    runs = {}
    for label, (search, rollout) in ways.items():
        # one process (workers=1): the match runs here, with these functions
        players.uct_search, uct.random_rollout = search, rollout
        t0 = time.perf_counter()
        m = play_match(game, me, opp, games=a.games, opening_plies=2, seed=a.seed, workers=1,
                       desc=f"{label}", progress=False)
        runs[label] = (time.perf_counter() - t0, m)
    players.uct_search, uct.random_rollout = uct.uct_search, random_rollout
    (slow_s, slow), (fast_s, _) = list(runs.values())[:2]
    # the UCT player moves on every other ply after the opening
    uct_moves = sum((len(g.actions) - 2 + (not g.a_first)) // 2 for g in slow.games)
    same = all([g.actions for g in m.games] == [g.actions for g in slow.games] for _, m in runs.values())
    print(f"{game.name}: model ({model or 'random net'}, {a.sims} simulations) vs uct{a.playouts}, "
          f"{a.games} games, about {uct_moves} UCT moves")
    for label, (wall, m) in runs.items():
        print(f"  {label:17s} {wall:7.1f} s   score {m.score.score:.1%}   "
              f"{wall / max(uct_moves, 1):.4f} s per UCT move (the model's moves included)")
    print(f"speed-up of the match: {slow_s / fast_s:.2f}x (generic / fast playouts, same run)")
    if "UCT kernel" in runs:
        kernel_s = runs["UCT kernel"][0]
        print(f"speed-up of the match: {fast_s / kernel_s:.2f}x (fast playouts / UCT kernel), "
              f"{slow_s / kernel_s:.2f}x (generic / UCT kernel)")
    print(f"same games all {len(runs)} ways: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
