"""The ``zeroloop`` command."""

from __future__ import annotations

import argparse
import json
import sys
import time

from zeroloop.engine.games import GAME_NAMES


def _game_help() -> str:
    return "; ".join(f"{k}: {v}" for k, v in GAME_NAMES.items())


#: Options several commands take, worded alike.
DEVICE = {"default": "auto", "help": "auto (CUDA if present), cpu or cuda[:N]"}
WORKERS = {"type": int, "default": None, "help": "worker processes (default: one per core)"}
PARAMS = {"default": "params.yaml", "help": "params file (default params.yaml)"}


def add_search_options(p: argparse.ArgumentParser, *, game: str | None, games: str = "see zeroloop --help",
                       ids: bool = False, model: str, sims: int, per: str, seed: str) -> None:
    """--game, --model, --sims, --seed and --device: the options of every
    command that searches with one model, worded alike. ``game``: the default
    game (None: --game is required), ``games`` where the names are listed;
    ``ids``: --model also takes an id (champion, genN, ...), ``model`` what
    runs without it; ``sims``: the default simulations per ``per``; ``seed``:
    what the seed is for."""
    default = f"default {game}; " if game else ""
    p.add_argument("--game", required=game is None, default=game, help=f"game name ({default}{games})")
    p.add_argument("--model", help=f"model file{' or id' if ids else ' (.pt) written by zeroloop'} "
                                   f"(default: {model})")
    p.add_argument("--sims", type=int, default=sims, help=f"simulations per {per} (default {sims})")
    p.add_argument("--seed", type=int, default=0, help=f"seed {seed} (default 0)")
    p.add_argument("--device", **DEVICE)


def cmd_analyse(args: argparse.Namespace) -> int:
    from zeroloop.pipeline.analysis import Analyser

    try:
        analyser = Analyser.build(args.game, args.model, args.sims, args.seed, args.device)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop analyse: {exc}", file=sys.stderr)
        return 2
    for _ in analyser.run(sys.stdin, sys.stdout):
        pass
    return 0


def cmd_selfplay(args: argparse.Namespace) -> int:
    from zeroloop.engine.games import make_game
    from zeroloop.engine.search import SearchConfig
    from zeroloop.engine.selfplay import SelfplayConfig
    from zeroloop.pipeline.data.shards import SelfplayJob, run_selfplay

    try:
        game = make_game(args.game)
        job = SelfplayJob(game=game.name, model=args.model,
                          selfplay=SelfplayConfig(games=args.games, shard_games=args.shard_games),
                          search=SearchConfig(simulations=args.sims), seed=args.seed,
                          in_flight=args.in_flight, device=args.device)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop selfplay: {exc}", file=sys.stderr)
        return 2
    from zeroloop.pipeline.runtime.backend import Backend, WorkerLost, use_backend

    use_backend(Backend(args.backend, args.ray_address))
    t0 = time.perf_counter()
    try:
        shards, stats = run_selfplay(job, workers=args.workers, progress=not args.quiet)
    except (ValueError, WorkerLost) as exc:
        print(f"zeroloop selfplay: {exc}", file=sys.stderr)
        return 2
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
        from zeroloop.pipeline.data.shards import write_games_jsonl

        write_games_jsonl(args.out, game, records)
        summary["written"] = args.out
    print(json.dumps(summary, indent=2))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from zeroloop.pipeline.params import ParamsError
    from zeroloop.pipeline.tracking.store import tracking_errors, tracking_uri
    from zeroloop.pipeline.tuning.run import tune
    from zeroloop.pipeline.tuning.study import TERMINATED, stop_on_sigterm
    from zeroloop.pipeline.tuning.tracker import storage_key

    stop_on_sigterm()
    try:
        summary = tune(args.params, objective=args.objective, trials=args.trials, storage=args.storage,
                       study_name=args.study, model=args.model, seed=args.seed, workers=args.workers,
                       jobs=args.jobs, timeout=args.timeout,
                       log=lambda line: print(f"zeroloop tune: {line}", file=sys.stderr))
    except (ParamsError, ValueError, FileNotFoundError) as exc:
        print(f"zeroloop tune: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        how = "stopped by SIGTERM" if TERMINATED.is_set() else "interrupted"
        print(f"zeroloop tune: {how}; finished trials are stored in {storage_key(args.storage)}; rerun the "
              "same command to continue the study", file=sys.stderr)
        return 143 if TERMINATED.is_set() else 130
    except Exception as exc:
        if not isinstance(exc, tracking_errors()):
            raise
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        print(f"zeroloop tune: error: MLflow at {tracking_uri()} failed: {first}; finished trials are "
              f"stored in {storage_key(args.storage)}; rerun the same command to continue", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0 if summary["best"] else 1


def cmd_play(args: argparse.Namespace) -> int:
    from zeroloop.apps.play import NetCache, PlayError, new_session, play_terminal

    try:
        session = new_session(args.game, args.model, sims=args.sims, human_first=not args.ai_first,
                              nets=NetCache(args.device), seed=args.seed)
    except PlayError as exc:
        print(f"zeroloop play: {exc}", file=sys.stderr)
        return 2
    try:
        return play_terminal(session, sys.stdin, sys.stdout)
    except KeyboardInterrupt:
        print("\nGame abandoned.")
        return 130


def cmd_gtp(args: argparse.Namespace) -> int:
    from zeroloop.apps.gtp import main

    return main(args.game, args.model, args.sims, args.root, args.device, args.seed)


def cmd_serve(args: argparse.Namespace) -> int:
    from zeroloop.apps.server import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"zeroloop serve: listening on {args.host}: anyone who can reach it can play and read "
              "your recorded games", file=sys.stderr)
    print(f"zeroloop: open http://{args.host}:{args.port}/ (Ctrl-C stops)", file=sys.stderr)
    try:
        serve(args.host, args.port, args.root, args.device, args.max_searches, args.max_sessions,
              args.idle_minutes)
    except OSError as exc:  # the port is taken, the address is not this machine's, ...
        print(f"zeroloop serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    return 0


def cmd_experiments(args: argparse.Namespace) -> int:
    from zeroloop.apps.experiments import collect, table

    try:
        runs = collect(args.repo)
    except ValueError as exc:  # not a git repository, no commit, no DVC
        print(f"zeroloop experiments: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - DVC's own errors
        print(f"zeroloop experiments: {args.repo}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    base = next((r for r in runs if r.name == args.baseline), None) if args.baseline else None
    if args.baseline and base is None:
        print(f"zeroloop experiments: no run named {args.baseline!r} (runs: "
              f"{', '.join(r.name for r in runs) or 'none'})", file=sys.stderr)
        return 2
    print(table(runs, base, groups_from=args.groups))
    return 0


def cmd_errors(args: argparse.Namespace) -> int:
    from zeroloop.apps.errors import measure

    try:
        return measure(args.models, args.set, args.params, args.root, args.sims, args.json, args.pairs)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop errors: {exc}", file=sys.stderr)
        return 2


def cmd_match(args: argparse.Namespace) -> int:
    from zeroloop.apps.match import main_or_error

    return main_or_error(args.model, args.against, args.games, args.sims, args.seed, args.params, args.root,
                         args.workers, args.json)


def cmd_check(args: argparse.Namespace) -> int:
    from zeroloop.pipeline.stages.__main__ import main as run_stage

    return run_stage(["check", "--params", args.params])  # the check_params stage itself: the same line


def cmd_pull(args: argparse.Namespace) -> int:
    from zeroloop.apps.remote import pull

    return pull(args.remote)


def cmd_preset(args: argparse.Namespace) -> int:
    from zeroloop.pipeline.params.loading import ParamsError
    from zeroloop.pipeline.params.presets import preset_names, preset_path, write_preset

    if args.name is None:
        for name in preset_names(args.presets):
            print(name)
        return 0
    try:
        params = write_preset(args.name, args.out, args.presets)
    except ParamsError as exc:
        print(f"zeroloop preset: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {params.game}, {len(params.generations)} generations, from "
          f"{preset_path(args.name, args.presets)} over the defaults")
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
            "most-visited move), value (for the side to move, -1..1), visits, q, "
            "prior and policy (the search's) per legal move. Search runs at temperature 0 "
            "with no noise. A bad line gets {\"moves\", \"error\"} and the rest are still answered."),
        epilog="Without --model a randomly initialised network (seeded by --seed) is "
               "used, so the command works before any training.")
    add_search_options(a, game=None, model="a random net", sims=200, per="position",
                       seed="for the random net")
    a.set_defaults(func=cmd_analyse)

    s = sub.add_parser("selfplay", help="play self-play games with a model (or a random net)",
                       description="Play self-play games through the batched search over "
                                   "worker processes and print a summary.")
    add_search_options(s, game="connect4", model="a random net", sims=100, per="move",
                       seed="for the games and the random net")
    s.add_argument("--games", type=int, default=64, help="games to play (default 64)")
    s.add_argument("--workers", **WORKERS)
    s.add_argument("--shard-games", type=int, default=64, help="games per shard (default 64)")
    s.add_argument("--in-flight", type=int, default=128,
                   help="games each worker searches together (default 128; speed only)")
    s.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local worker processes or Ray tasks (default local; the same games)")
    s.add_argument("--ray-address", default="",
                   help="with --backend ray: '' starts Ray here (or joins RAY_ADDRESS), 'auto', "
                        "'host:port' or 'ray://host:port'")
    s.add_argument("--out", help="write the games as JSON lines to this file")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_selfplay)

    t = sub.add_parser(
        "tune", help="Optuna study over c_puct and temperature",
        description="Tune the search settings: each trial samples c_puct, temperature and "
                    "temperature moves from the `tune:` section of params.yaml. search: the model "
                    "plays tune.games games against the reference player (tune.reference) on the same "
                    "seeded openings in every trial; trial 0 is the current settings. Trials are "
                    "stored in --storage (resumable by --study name; Ctrl-C is safe) and logged to "
                    "MLflow as nested runs. At the end the best and the current settings replay "
                    "tune.confirm_games games on fresh openings, and reports/tuning/best_params.yaml "
                    "gets the best settings, the gains with 95% intervals and the `dvc exp run -S "
                    "...` command that applies them, beside plots.",
        epilog="Watch a study: optuna-dashboard sqlite:///optuna.db (or the journal file's path).")
    t.add_argument("--objective", choices=["search", "selfplay"], default="search",
                   help="search: a fixed model's match score under the sampled settings (cheap); "
                        "selfplay: a short training run per trial with the sampled self-play "
                        "settings, scored by its final model (tune.selfplay_generations x "
                        "tune.selfplay_games)")
    t.add_argument("--trials", type=int, default=20, help="trials to run now (default 20)")
    t.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="start no trial after this many seconds (each job's running trial finishes, "
                        "then the results are written); with it, --trials is an upper bound")
    t.add_argument("--storage", default="sqlite:///optuna.db",
                   help="Optuna storage: sqlite:///optuna.db (default, one process), "
                        "journal:optuna.journal (several processes on one machine), or a "
                        "PostgreSQL URL (several machines: run the same command on each)")
    t.add_argument("--jobs", type=int, default=1,
                   help="processes sharing the study on this machine (needs a journal or RDB storage)")
    t.add_argument("--study", help="study name (default <game>-search); the same name resumes it")
    t.add_argument("--model", help="search objective: model file (default: models/champion.pt, else the "
                                   "newest generation's best, else the model shipped for the game)")
    t.add_argument("--params", **PARAMS)
    t.add_argument("--seed", type=int, default=0, help="seed of the openings and the sampler (default 0)")
    t.add_argument("--workers", **WORKERS)
    t.set_defaults(func=cmd_tune)

    pl = sub.add_parser(
        "play", help="play a model in the terminal",
        description="Play against a model in the terminal: type moves in the game's notation; "
                    "'undo' takes back your last move, 'hint' lists the legal moves, 'quit' ends. "
                    "After each AI move its value estimate (for the AI, -1..1) and visit shares "
                    "are shown.",
        epilog="Models: --model takes a file, or an id: champion (models/champion.pt), genN, "
               "genN-candidate, reference (Connect Four: the default run's champion, shipped), shipped "
               "(a small model that comes with zeroloop), random. Default: the first that exists "
               "for the game, in that order. Games: " + _game_help())
    add_search_options(pl, game=None, games="see below", ids=True,
                       model="the pipeline's champion for the game", sims=200, per="AI move",
                       seed="for the untrained network")
    side = pl.add_mutually_exclusive_group()
    side.add_argument("--human-first", action="store_true", help="you play X and move first (default)")
    side.add_argument("--ai-first", action="store_true", help="the AI plays X and moves first")
    pl.set_defaults(func=cmd_play)

    gt = sub.add_parser(
        "gtp", help="a model as a Go engine over GTP (for Sabaki, GoGui, twogtp)",
        description="Speak the Go Text Protocol (version 2) on standard input and output, so GUIs "
                    "(Sabaki, GoGui) and match tools (GnuGo's twogtp, gogui-twogtp) can drive a model. "
                    "genmove searches --sims simulations and plays the most-visited move. Commands: "
                    "protocol_version, name, version, known_command, list_commands, boardsize, "
                    "clear_board, komi, play, genmove, undo, showboard, final_score, quit. Bad input "
                    "gets a '?' answer and the engine keeps running.",
        epilog="Example: gogui -program 'zeroloop gtp --game go-9 --model champion'. Models: a file, "
               "or an id (champion, genN, random: an untrained network, which plays any board size).")
    add_search_options(gt, game="go-9", games="go-7, go-N or go-N-komiK", ids=True,
                       model="the pipeline's champion for the game, else an untrained network", sims=200,
                       per="genmove", seed="for the untrained network")
    gt.add_argument("--root", default=".", help="project directory with models/ (default .)")
    gt.set_defaults(func=cmd_gtp)

    sv = sub.add_parser(
        "serve", help="web page: play the models, view recorded games",
        description="Serve a web page to play the models (pick game, model, strength and colour; "
                    "click to move; undo, restart; the AI's value and visit distribution) and to step "
                    "through recorded self-play and gate games, with the JSON API behind it "
                    "(documented at /docs).")
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sv.add_argument("--root", default=".", help="project directory with models/, data/, reports/ (default .)")
    sv.add_argument("--device", **DEVICE)
    sv.add_argument("--max-searches", type=int, default=None,
                    help="AI moves searched at once (default: one per core); more get 503 + Retry-After")
    sv.add_argument("--max-sessions", type=int, default=200,
                    help="games kept at once (default 200); a new game beyond it takes the place of one "
                         "idle --idle-minutes, else gets 503 + Retry-After: live games are never dropped")
    sv.add_argument("--idle-minutes", type=float, default=30.0,
                    help="minutes a game may sit untouched before a new one may take its place (default 30)")
    sv.set_defaults(func=cmd_serve)

    ex = sub.add_parser(
        "experiments", help="the DVC experiments of this project side by side (markdown table)",
        description="One row per DVC experiment of the current commit (run them with `dvc exp run -n NAME "
                    "-S key=value`) and the baseline: the params it changed, minutes of training, Elo "
                    "against the rollout-UCT baseline, and the move error against perfect play, overall "
                    "with its 95%% interval and per Pons group, searched and raw.")
    ex.add_argument("--repo", default=".", help="the DVC project (default .)")
    ex.add_argument("--baseline", default=None,
                    help="the run the others are compared with (default: the first, the commit's own)")
    ex.add_argument("--groups", choices=["validation", "test"], default="validation",
                    help="which position set's per-group errors to show (default validation; the overall "
                         "errors of both sets are always shown)")
    ex.set_defaults(func=cmd_experiments)

    er = sub.add_parser(
        "errors", help="move error of model files against perfect play, on the run's position sets",
        description="The share of positions where a model's move is a mistake against perfect play, "
                    "for its raw policy and for its search (evaluate.simulations, mcts settings, "
                    "runtime.precision of --params), overall with its 95% interval and per Pons "
                    "group, on the pipeline's validation positions (data/positions.json), its held-out "
                    "test positions (data/test_positions.json) or both. The sets are the ones "
                    "`dvc repro` made (`dvc repro positions test_positions` makes only them).",
        epilog="Models: files, or ids as `zeroloop play` takes them (champion, genN, genN-candidate, "
               "shipped, reference: the default run's champion). With two or more models, each after the "
               "first is then compared with the first position by position (paired, as an ablation "
               "compares two arms): the difference in points with its 95% interval, how many positions "
               "only one of the two got wrong, and McNemar's exact p. With --pairs, the models are "
               "baseline/arm pairs instead, one pair a seed (A1 B1 A2 B2 ...): each arm is compared with "
               "its own baseline, then all pairs pooled into one comparison (every position once a pair), "
               "as the notebook's rounds pool their seeds. Each file is read once, at the start: one "
               "replaced meanwhile is still measured, on every set, as it was then.")
    er.add_argument("models", nargs="+", help="model files or ids")
    er.add_argument("--set", choices=["validation", "test", "both"], default="test",
                    help="position set (default test: the held-out one)")
    er.add_argument("--sims", type=int, default=None, help="simulations (default evaluate.simulations)")
    er.add_argument("--params", **PARAMS)
    er.add_argument("--root", default=".", help="project directory with data/ and models/ (default .)")
    er.add_argument("--json", action="store_true",
                    help="one JSON line per model and set (and per paired comparison) instead of tables")
    er.add_argument("--pairs", action="store_true",
                    help="read the models as baseline/arm pairs, one a seed (A1 B1 A2 B2 ...): each arm "
                         "against its own baseline, then the pairs pooled")
    er.set_defaults(func=cmd_errors)

    ma = sub.add_parser(
        "match", help="a model against GnuGo, rollout UCT, random play or another model, with intervals",
        description="Colour-balanced games of a model against each opponent, searched as the evaluate "
                    "stage searches (evaluate.simulations, mcts settings, runtime.precision of --params), "
                    "from the same seeded random openings (evaluate.opening_plies) for every opponent and "
                    "every model measured with the same seed: the score (wins + half the draws) with its "
                    "95% interval and the Elo difference it implies.",
        epilog="Opponents: gnugo:LEVEL (Go; GnuGo over GTP, level 1-10), uct:PLAYOUTS (rollout UCT), random, "
               "greedy, or a model file or id, searched as MODEL is. Example: zeroloop match champion "
               "--against gnugo:1 gnugo:10 --games 60")
    ma.add_argument("model", help="model file or id (champion, genN, ...)")
    ma.add_argument("--against", nargs="+", required=True, help="opponents, each played in its own match")
    ma.add_argument("--games", type=int, default=60, help="games per opponent, even (default 60)")
    ma.add_argument("--sims", type=int, default=None,
                    help="simulations a move (default evaluate.simulations)")
    ma.add_argument("--seed", type=int, default=0, help="seed of the openings and the players (default 0)")
    ma.add_argument("--workers", **WORKERS)
    ma.add_argument("--params", **PARAMS)
    ma.add_argument("--root", default=".", help="project directory with models/ (default .)")
    ma.add_argument("--json", action="store_true", help="one JSON line per opponent instead of text")
    ma.set_defaults(func=cmd_match)

    pr = sub.add_parser(
        "preset", help="write params.yaml from a preset (the defaults with the preset's keys over them)",
        description="Write params.yaml as the defaults with presets/NAME.yaml's keys over them: a preset "
                    "holds only what differs from the defaults. Each key's line in the current params.yaml "
                    "keeps its comment. Without NAME: list the presets. `make preset NAME=...` runs it.")
    pr.add_argument("name", nargs="?", help="a preset's name (presets/NAME.yaml) or a preset file's path")
    pr.add_argument("--out", default="params.yaml", help="the file to write (default params.yaml)")
    pr.add_argument("--presets", default="presets", help="the presets folder (default presets)")
    pr.set_defaults(func=cmd_preset)

    ck = sub.add_parser(
        "check", help="validate params.yaml as the pipeline's stages do (make repro runs it first)",
        description="Validate the whole params file, as the check_params stage does, and print one line: "
                    "what it holds, or what is wrong (exit 2). DVC resolves dvc.yaml's foreach over "
                    "generations before any stage runs, so a bad generations entry (a key 0, a prev that "
                    "is not g - 1, a missing prev, a key written twice) would otherwise reach you as DVC's "
                    "graph error; run this before dvc repro or dvc exp run (make repro does).")
    ck.add_argument("--params", **PARAMS)
    ck.set_defaults(func=cmd_check)

    pu = sub.add_parser(
        "pull", help="dvc pull, after checking that the DVC remote is there (make pull runs it)",
        description="Check the DVC remote, then run dvc pull from it. A folder remote that is not there "
                    "(removed, moved, a share not mounted) stops it before DVC starts, in one line naming "
                    "the folder; DVC itself would say only 'Checkout failed ... Is your cache up to date?'. "
                    "A URL remote (s3://, ssh://, ...) is named when the pull fails.")
    pu.add_argument("-r", "--remote", help="the remote's name (default: the default remote)")
    pu.set_defaults(func=cmd_pull)
    return p


def _argument_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with arguments argparse cannot check by itself, or None."""
    if getattr(args, "device", None) is not None:
        from zeroloop.engine.nn import resolve_device

        try:
            resolve_device(args.device)
        except ValueError as exc:
            return str(exc)
    if args.command == "serve" and not 1 <= args.port <= 65535:
        return f"--port {args.port}: must be 1-65535"
    if args.command == "serve" and args.max_searches is not None and args.max_searches < 1:
        return f"--max-searches {args.max_searches}: must be >= 1"
    if args.command == "serve" and args.max_sessions < 1:
        return f"--max-sessions {args.max_sessions}: must be >= 1"
    if args.command == "serve" and not args.idle_minutes > 0:
        return f"--idle-minutes {args.idle_minutes}: must be > 0"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from zeroloop.pipeline.runtime.process import init_worker_threads

    if args.command != "pull":  # pull runs DVC alone: no torch to import (2 s)
        init_worker_threads()  # one torch thread per process; parallelism comes from processes
    problem = _argument_problem(args)
    if problem:
        print(f"zeroloop {args.command}: {problem}", file=sys.stderr)
        return 2
    if args.command == "tune" and (args.trials < 1 or args.jobs < 1):
        print("zeroloop tune: --trials and --jobs must be >= 1", file=sys.stderr)
        return 2
    if args.command == "tune" and args.timeout is not None and not args.timeout > 0:
        print(f"zeroloop tune: --timeout must be a positive number of seconds, not {args.timeout:g}",
              file=sys.stderr)
        return 2
    if args.command == "analyse" and args.sims < 1:
        print("zeroloop analyse: --sims must be >= 1", file=sys.stderr)
        return 2
    from zeroloop.pipeline.runtime.process import start_work

    start_work()  # a no-op unless the program (zeroloop.__main__) turned collection off
    return args.func(args)
