"""One model against itself at two inference precisions: does a faster number
format play as strongly?

The same model file is searched by both players with the same settings; only
``runtime.precision`` differs (default: int8 against fp32). Games are
colour-balanced from random openings, in worker processes as the pipeline's
matches are. Printed: the machine, the score of the first precision with its
95% interval (from the spread of the opening pairs' scores), wins/draws/losses
and the pairs' (pentanomial) counts. An interval that holds 50% says no
difference was found at this many games.

    python benchmarks/precision_match.py [--precision int8] [--against fp32] [--games 400] [--sims 100]
        [--opening-plies 4] [--model PATH]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    from zeroloop.engine.nn.inference import PRECISIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="model file (default: the shipped Connect Four model)")
    ap.add_argument("--precision", default="int8", choices=PRECISIONS, help="the first player's precision")
    ap.add_argument("--against", default="fp32", choices=PRECISIONS, help="the second player's precision")
    ap.add_argument("--games", type=int, default=400, help="games (even: each opening with both colours)")
    ap.add_argument("--sims", type=int, default=100, help="simulations per move, both players")
    ap.add_argument("--opening-plies", type=int, default=4, help="random plies before the players move")
    ap.add_argument("--workers", type=int, default=0, help="worker processes (0: one per core)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from zeroloop.engine.nn.machine import describe, summary_line
    from zeroloop.engine.search import SearchConfig
    from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
    from zeroloop.pipeline.data.storage import load_model
    from zeroloop.pipeline.matches import PlayerSpec, play_match

    model = a.model or str(SHIPPED_DIR / "connect4.pt")
    net, game, _ = load_model(model)
    print("machine: " + summary_line(describe("cpu", a.precision), a.precision))
    search = SearchConfig(simulations=a.sims)
    one, two = (PlayerSpec("mcts", f"{prec}", model=model, search=search, device="cpu", precision=prec)
                for prec in (a.precision, a.against))
    if a.precision == a.against:
        two = PlayerSpec("mcts", f"{a.against} (second)", model=model, search=search, device="cpu",
                         precision=a.against)
    t0 = time.perf_counter()
    m = play_match(game, one, two, games=a.games, opening_plies=a.opening_plies, seed=a.seed,
                   workers=a.workers or None, desc=f"{one.name} vs {two.name}")
    from zeroloop.engine.rating import paired_interval, pentanomial

    s = m.score
    lo, hi = paired_interval(m.pair_scores())
    wall = time.perf_counter() - t0
    print(f"model {model} ({game.name}, {net.config.shape}), {a.sims} simulations a "
          f"move, {a.opening_plies} random opening plies, {len(m.games)} games in {wall:.0f} s")
    print(f"{one.name} against {two.name}: score {s.score:.1%} (95% interval {lo:.1%} to {hi:.1%}), "
          f"{s.wins} wins, {s.draws} draws, {s.losses} losses; "
          f"pairs scoring 0, 1/4, 1/2, 3/4, 1: {pentanomial(m.pair_scores())}")


if __name__ == "__main__":
    main()
