"""gate@g: the candidate against the best model; it becomes the best only when
it scores at least ``gate.threshold`` (wins + half the draws)."""

from __future__ import annotations

import time

from zeroloop.arena import PlayerSpec, play_match
from zeroloop.config import Params
from zeroloop.rating import SPRT, gate_decision
from zeroloop.stages.common import derive_seed, model_path, report_path, say, write_json
from zeroloop.storage import atomic_write_bytes, load_model
from zeroloop.tracking import Tracker


def model_spec(p: Params, path: str, name: str, settings) -> PlayerSpec:
    return PlayerSpec("mcts", name, model=path, simulations=settings.simulations, c_puct=p.mcts.c_puct,
                      temperature=settings.temperature, temperature_moves=settings.temperature_moves,
                      device=p.runtime.device)


def run(p: Params, gen: int, prev: int) -> None:
    game = p.make_game()
    cand, best = model_path(gen, "candidate"), model_path(prev)
    _, _, best_meta = load_model(best, game)  # fail early, naming a damaged file
    load_model(cand, game)
    origin = best_meta.get("origin", prev)
    g = p.gate
    sprt = SPRT(g.sprt.elo0, g.sprt.elo1, g.sprt.alpha, g.sprt.beta) if g.sprt.enabled else None
    t0 = time.perf_counter()
    match = play_match(game, model_spec(p, str(cand), f"gen{gen}", g),
                       model_spec(p, str(best), f"gen{origin}", g), games=g.games,
                       opening_plies=g.opening_plies, seed=derive_seed(p.seed, "gate", gen),
                       workers=p.runtime.workers or None, sprt=sprt, desc=f"gate@{gen}")
    score = match.score
    accepted = gate_decision(score, g.threshold)
    winner = cand if accepted else best
    # the new best is a byte copy, so its checksum shows which model it is
    atomic_write_bytes(model_path(gen), winner.read_bytes())
    lo, hi = score.interval(0.95)
    result = {
        "generation": gen, "candidate": f"gen{gen}", "opponent": f"gen{origin}",
        "accepted": int(accepted), "best_origin": gen if accepted else origin,
        "score": round(score.score, 4), "ci95_low": round(lo, 4), "ci95_high": round(hi, 4),
        "threshold": g.threshold, "wins": score.wins, "draws": score.draws, "losses": score.losses,
        "games": score.games, "elo_diff": round(score.elo_diff, 1),
        "sprt": (sprt.status(score) if sprt else "off"),
        "stopped_early": int(match.stopped_early is not None),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    write_json(report_path(gen, "gate"), result)
    # every game, for the viewer (`zeroloop serve`): moves from the start, opening included
    write_json(report_path(gen, "gate_games"), {
        "game": game.name, "a": f"gen{gen}", "b": f"gen{origin}",
        "games": [{"moves": game.format_moves(g.actions), "a_first": g.a_first, "result": g.result}
                  for g in match.games]})
    with Tracker.open(p) as tr:
        tr.log_generation(gen, {f"gate/{k}": v for k, v in result.items()
                                if isinstance(v, int | float) and k != "generation"})
        tr.log_summary({"gate_score": score.score, "gate_accepted": int(accepted)}, step=gen)
    verdict = "accepted: new best" if accepted else f"rejected: gen{origin} stays best"
    say(f"gate@{gen}", f"candidate scored {score.score:.1%} [{lo:.1%}, {hi:.1%}] in {score.games} games "
                       f"(+{score.wins} ={score.draws} -{score.losses}); {verdict}")
