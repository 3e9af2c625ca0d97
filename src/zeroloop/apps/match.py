"""``zeroloop match``: a model against other players over colour-balanced
games, as the evaluate stage plays its baselines, with each score's 95%
interval and the Elo difference it implies.

Opponents: ``gnugo:L`` (Go: GnuGo at level L over GTP), ``uct:N`` (rollout
UCT, N playouts a move), ``random``, ``greedy``, or another model (an id as
``zeroloop play`` takes it, or a file), searched as the first one is. The
openings depend only on the seed and the game, so two models measured with
the same seed meet each opponent on the same openings (a paired comparison).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

#: the opponent kinds written without a model
KINDS = ("gnugo:LEVEL", "uct:PLAYOUTS", "random", "greedy")


def opponent_spec(p, text: str, root: str, game):
    """The :class:`~zeroloop.pipeline.matches.PlayerSpec` that ``text`` names."""
    from zeroloop.apps.play import PlayError, resolve_model
    from zeroloop.pipeline.matches import PlayerSpec, model_player

    kind, _, arg = text.partition(":")
    if kind in ("random", "greedy") and not arg:
        return PlayerSpec(kind, kind)
    if kind in ("gnugo", "uct"):
        if not arg.isdigit() or int(arg) < 1 or (kind == "gnugo" and int(arg) > 10):
            limit = "a level 1-10" if kind == "gnugo" else "a number of playouts >= 1"
            example = "gnugo:10" if kind == "gnugo" else "uct:1000"
            raise ValueError(f"--against {text}: {kind} takes {limit}, as {example}")
        if kind == "gnugo":
            from zeroloop.engine.gtp_client import find_gnugo

            if not game.name.startswith("go-"):
                raise ValueError(f"--against {text}: GnuGo plays Go, not {game.name}")
            if find_gnugo() is None:
                raise ValueError("GnuGo is not installed (`make gnugo`, or set ZEROLOOP_GNUGO to its path)")
            return PlayerSpec("gnugo", f"gnugo{arg}", level=int(arg))
        return PlayerSpec("uct", f"uct{arg}", playouts=int(arg))
    try:
        info = resolve_model(game, text, root)
    except PlayError as exc:
        raise ValueError(f"--against {text}: {exc} (or one of {', '.join(KINDS)})") from None
    if info.path is None:
        raise ValueError(f"--against {text}: an untrained network; name a model file or id")
    return model_player(p, info.path, text, p.evaluate)


def elo_text(score: float, low: float, high: float) -> str:
    """The Elo difference a score implies, with the interval's ends; an end
    at 0% or 100% is unbounded."""
    def elo(s: float) -> str:
        if s <= 0.0:
            return "-inf"
        if s >= 1.0:
            return "+inf"
        return f"{-400 * math.log10(1 / s - 1):+.0f}"
    return f"Elo {elo(score)} [{elo(low)}, {elo(high)}]"


def run(model: str, against: list[str], games: int, sims: int | None, seed: int, params_file: str, root: str,
        workers: int | None, as_json: bool) -> int:
    from zeroloop.apps.errors import evaluate_params
    from zeroloop.apps.play import PlayError, resolve_model
    from zeroloop.engine.arena import even_games
    from zeroloop.pipeline.matches import model_player, play_match

    try:
        even_games(games)
    except ValueError:
        raise ValueError(f"--games {games}: must be even and >= 2 (colour-balanced pairs)") from None
    p = evaluate_params(params_file, sims)
    game = p.make_game()
    try:
        info = resolve_model(game, model, root)
    except PlayError as exc:
        raise ValueError(str(exc)) from None
    if info.path is None:
        raise ValueError(f"{model}: an untrained network; name a model file or id")
    me = model_player(p, info.path, model, p.evaluate)
    opponents = [opponent_spec(p, a, root, game) for a in against]
    if not as_json:
        e = p.evaluate
        print(f"{model} ({info.path}), {game.name}: {games} colour-balanced games a match at "
              f"{e.simulations} simulations a move, {e.opening_plies} random opening plies, seed {seed}")
    for opp in opponents:
        m = play_match(game, me, opp, games=games, opening_plies=p.evaluate.opening_plies, seed=seed,
                       workers=workers, desc=f"{model} vs {opp.name}")
        s = m.score
        lo, hi = s.interval(0.95)
        if as_json:
            print(json.dumps({"model": model, "path": str(Path(info.path)), "opponent": opp.name,
                              "games": games,
                              "simulations": p.evaluate.simulations, "seed": seed, "wins": s.wins,
                              "draws": s.draws, "losses": s.losses, "score": round(s.score, 4),
                              "ci95": [round(lo, 4), round(hi, 4)]}), flush=True)
        else:
            print(f"  vs {opp.name}: {s.wins}-{s.draws}-{s.losses} (W-D-L), score {100 * s.score:.1f}% "
                  f"[{100 * lo:.1f}, {100 * hi:.1f}], {elo_text(s.score, lo, hi)}", flush=True)
    return 0


def main_or_error(*args) -> int:
    try:
        return run(*args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"zeroloop match: {exc}", file=sys.stderr)
        return 2
