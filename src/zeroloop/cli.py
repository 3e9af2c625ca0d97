"""The ``zeroloop`` command."""

from __future__ import annotations

import argparse
import json
import sys
import time

from zeroloop.games import GAME_NAMES


def _game_help() -> str:
    return "; ".join(f"{k}: {v}" for k, v in GAME_NAMES.items())


def cmd_analyse(args: argparse.Namespace) -> int:
    from zeroloop.engine import Analyser

    try:
        analyser = Analyser.build(args.game, args.model, args.sims, args.seed, args.device)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop analyse: {exc}", file=sys.stderr)
        return 2
    for _ in analyser.run(sys.stdin, sys.stdout):
        pass
    return 0


def cmd_selfplay(args: argparse.Namespace) -> int:
    from zeroloop.games import make_game
    from zeroloop.search import SearchConfig
    from zeroloop.selfplay_jobs import SelfplayJob, run_selfplay

    try:
        game = make_game(args.game)
        job = SelfplayJob(game=game.name, model=args.model, games=args.games,
                          search=SearchConfig(simulations=args.sims), seed=args.seed,
                          shard_games=args.parallel, device=args.device)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop selfplay: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    shards, stats = run_selfplay(job, workers=args.workers, progress=not args.quiet)
    records = [r for s in shards for r in s.records]
    wall = time.perf_counter() - t0
    wins = sum(r.result > 0 for r in records)
    losses = sum(r.result < 0 for r in records)
    summary = {
        "game": game.name, "games": len(records), "first_player_wins": wins,
        "second_player_wins": losses, "draws": len(records) - wins - losses,
        "moves": sum(len(r.actions) for r in records), "simulations": stats.simulations,
        "wall_s": round(wall, 1), "simulations_per_s": round(stats.simulations / wall),
    }
    if args.out:
        from zeroloop.selfplay_jobs import write_games_jsonl

        write_games_jsonl(args.out, game, records)
        summary["written"] = args.out
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="zeroloop", description="AlphaZero training pipeline: engine tools.",
        epilog="Games: " + _game_help())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    a = sub.add_parser(
        "analyse", help="search positions read from stdin, one JSON answer per line",
        description=(
            "Read one position per line on stdin, written as the moves from the start "
            "in the game's notation (Connect Four: columns 1-7, e.g. 4453; tic-tac-toe: "
            "cells 1-9; gomoku/Othello: cells like d3, Othello 'pass'). An empty line "
            "is the start position. Writes one JSON line per position: moves, move (the "
            "most-visited move), value (for the side to move, -1..1), visits, q and "
            "prior per legal move. Search runs at temperature 0 with no noise. A bad "
            "line gets {\"moves\", \"error\"} and the rest are still answered."),
        epilog="Without --model a randomly initialised network (seeded by --seed) is "
               "used, so the command works before any training.")
    a.add_argument("--game", required=True, help="game name (see zeroloop --help)")
    a.add_argument("--model", help="model file (.pt) written by zeroloop; default: random net")
    a.add_argument("--sims", type=int, default=200, help="simulations per position (default 200)")
    a.add_argument("--seed", type=int, default=0, help="seed for the random net (default 0)")
    a.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    a.set_defaults(func=cmd_analyse)

    s = sub.add_parser("selfplay", help="play self-play games with a model (or a random net)",
                       description="Play self-play games through the batched search over "
                                   "worker processes and print a summary.")
    s.add_argument("--game", default="connect4", help="game name (default connect4)")
    s.add_argument("--model", help="model file; default: random net")
    s.add_argument("--games", type=int, default=64, help="games to play (default 64)")
    s.add_argument("--sims", type=int, default=100, help="simulations per move (default 100)")
    s.add_argument("--workers", type=int, default=None, help="worker processes (default: one per core)")
    s.add_argument("--parallel", type=int, default=64,
                   help="games per shard, searched together by one worker (default 64)")
    s.add_argument("--seed", type=int, default=0, help="seed for the games and the random net")
    s.add_argument("--device", default="auto", help="auto (CUDA if present), cpu or cuda[:N]")
    s.add_argument("--out", help="write the games as JSON lines to this file")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_selfplay)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from zeroloop.workers import init_worker_threads

    init_worker_threads()  # one torch thread per process; parallelism comes from processes
    if args.command == "analyse" and args.sims < 1:
        print("zeroloop analyse: --sims must be >= 1", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
