"""evaluate@g: the generation's best model against the baselines, and its
move error rate on the solver-labelled positions."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from zeroloop.arena import PlayerSpec, play_match
from zeroloop.config import Params
from zeroloop.evaluate import PositionSet, move_errors, perfect_scorer
from zeroloop.stages.common import POSITIONS, derive_seed, model_path, read_json, report_path, say, write_json
from zeroloop.stages.gate import model_spec
from zeroloop.storage import load_model
from zeroloop.tracking import Tracker


def opponents(p: Params, has_perfect: bool) -> list[PlayerSpec]:
    e = p.evaluate
    out = [PlayerSpec("random", "random"), PlayerSpec("uct", f"uct{e.uct_playouts}", playouts=e.uct_playouts)]
    if has_perfect and e.perfect_games and p.game == "tictactoe":
        out.append(PlayerSpec("perfect", "perfect"))  # Connect Four: error rate only (solving is slow)
    return out


def solver_errors(p: Params, path: str, positions: PositionSet) -> dict:
    """Error rates of the raw policy (most likely legal move) and of the search."""
    from zeroloop.nn import NetworkEvaluator
    from zeroloop.search import BatchedMCTS
    from zeroloop.stages.selfplay import search_config

    game = p.make_game()
    net, _, _ = load_model(path, game)
    ev = NetworkEvaluator(game, net, p.runtime.device)
    states = positions.states(game)
    priors, _ = ev(states)
    legal = np.stack([game.legal_mask(s) for s in states])
    policy_moves = np.where(legal, priors, -1).argmax(axis=1)
    cfg = replace(search_config(p), simulations=p.evaluate.simulations)
    mcts = BatchedMCTS(game, ev, cfg, len(states), rng=np.random.default_rng(0))
    for i, s in enumerate(states):
        mcts.set_root(i, s)
    visits = mcts.search(list(range(len(states))), add_noise=False).visits
    search_moves = np.where(legal, visits, -1).argmax(axis=1)
    pol, srch = move_errors(positions, policy_moves), move_errors(positions, search_moves)
    return {"positions": pol.positions, "policy_error_rate": round(pol.rate, 4),
            "search_error_rate": round(srch.rate, 4)}


def run(p: Params, gen: int) -> None:
    game = p.make_game()
    best = model_path(gen)
    _, _, meta = load_model(best, game)
    origin = meta.get("origin", gen)
    e = p.evaluate
    me = model_spec(p, str(best), f"gen{origin}", e)
    result: dict = {"generation": gen, "model": f"gen{origin}"}
    t0 = time.perf_counter()
    positions = PositionSet.from_json(read_json(POSITIONS))
    has_perfect = len(positions.moves) > 0 or perfect_scorer(game) is not None
    for k, opp in enumerate(opponents(p, has_perfect)):
        m = play_match(game, me, opp, games=e.games, opening_plies=e.opening_plies,
                       seed=derive_seed(p.seed, "evaluate", gen) + k, workers=p.runtime.workers or None,
                       desc=f"evaluate@{gen} vs {opp.name}")
        s = m.score
        lo, hi = s.interval(0.95)
        key = "uct" if opp.kind == "uct" else opp.name
        result[f"vs_{key}"] = {"opponent": opp.name, "score": round(s.score, 4), "ci95_low": round(lo, 4),
                               "ci95_high": round(hi, 4), "wins": s.wins, "draws": s.draws,
                               "losses": s.losses}
    if positions.moves:
        result["solver"] = solver_errors(p, str(best), positions)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    write_json(report_path(gen, "eval"), result)
    flat = {f"eval/{k}_score": v["score"] for k, v in result.items() if isinstance(v, dict) and "score" in v}
    if "solver" in result:
        flat.update({f"eval/{k}": v for k, v in result["solver"].items()})
    with Tracker.open(p) as tr:
        tr.log_generation(gen, flat)
        tr.log_summary({k.replace("eval/", ""): v for k, v in flat.items() if k != "eval/positions"},
                       step=gen)
    lines = [f"{v['opponent']} {v['score']:.0%}" for v in result.values()
             if isinstance(v, dict) and "opponent" in v]
    if "solver" in result:
        lines.append(f"solver error {result['solver']['search_error_rate']:.1%} "
                     f"(policy {result['solver']['policy_error_rate']:.1%})")
    say(f"evaluate@{gen}", f"gen{origin} vs " + ", ".join(lines))
