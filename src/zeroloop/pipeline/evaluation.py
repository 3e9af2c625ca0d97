"""Measuring a generation: solver-labelled test positions, the move error of
the raw policy and of the search, and matches against fixed baselines."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zeroloop.engine.arena import MatchResult
from zeroloop.engine.gtp_client import find_gnugo
from zeroloop.engine.perfect import perfect_scorer, perfect_value
from zeroloop.engine.positions import (
    PositionSet,
    decisive,
    group_errors,
    make_benchmark,
    move_errors,
    position_keys,
)
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
from zeroloop.pipeline.data.layout import Layout, derive_seed
from zeroloop.pipeline.data.storage import ShippedFile, load_model, local_file, read_json, write_json
from zeroloop.pipeline.matches import (
    MatchTask,
    PinnedModels,
    PlayerSpec,
    match_openings,
    match_tasks,
    model_player,
    play_match_task,
)
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.runtime.backend import Tick
from zeroloop.pipeline.runtime.process import machine, process_clock
from zeroloop.pipeline.runtime.workers import default_workers, run_tasks

#: Solver-labelled position sets shipped with the package: the default
#: validation and test sets, so that a fresh clone does not spend a minute
#: or more labelling them. Used only where the params ask for exactly that set.
LABELLED_DIR = SHIPPED_DIR / "reference" / "positions"


def shipped_set_path(game: str, *, test: bool, per_group: int, seed: int) -> Path:
    """Where the shipped copy of a position set would be."""
    return LABELLED_DIR / f"{game}-{'test' if test else 'validation'}-{per_group}-s{seed}.json.gz"


def set_digest(positions: PositionSet) -> str:
    """A position set's checksum (moves, labels and groups)."""
    return hashlib.sha256(json.dumps(positions.to_json(), sort_keys=True).encode()).hexdigest()


def shipped_positions(game: str, *, test: bool, per_group: int, seed: int,
                      validation: PositionSet | None = None) -> PositionSet | None:
    """The shipped copy of the set :func:`positions_step` would label, or
    None where none is shipped. A test set is drawn apart from a validation
    set, so its copy counts only when it was drawn apart from the same one
    (``validation``, by :func:`set_digest`)."""
    path = shipped_set_path(game, test=test, per_group=per_group, seed=seed)
    if not path.is_file():
        return None
    data = json.loads(gzip.decompress(path.read_bytes()))
    if test and (validation is None or data.get("validation_sha256") != set_digest(validation)):
        return None
    return PositionSet.from_json(data)


def shipped_copy(p: Params, layout: Layout, *, test: bool = False) -> tuple[Path, PositionSet] | None:
    """The shipped copy of the set ``p`` asks for (:func:`shipped_positions`)
    and its file, or None where none is shipped; a test set's validation set
    is read from ``layout.positions``."""
    e = p.evaluate
    n, seed = (e.test_positions_per_group, e.test_positions_seed) if test else (e.positions_per_group,
                                                                                 e.positions_seed)
    path = shipped_set_path(p.game, test=test, per_group=n, seed=seed)
    if not path.is_file():
        return None
    validation = PositionSet.from_json(read_json(layout.positions)) if test else None
    copy = shipped_positions(p.game, test=test, per_group=n, seed=seed, validation=validation)
    return None if copy is None else (path, copy)


def positions_step(p: Params, layout: Layout, *, test: bool = False, shipped: bool = True) -> PositionSet:
    """Positions labelled by a perfect player: Connect Four (with the ``solver``
    extra) in Pons' six benchmark groups, tic-tac-toe in one group of positions
    where the choice matters. An empty set, with a note saying why, where no
    perfect player exists or the count is 0.

    The validation set (``test`` false): ``evaluate.positions_per_group`` a
    group, drawn with ``evaluate.positions_seed`` (not the run's seed, so runs
    of every seed are measured on the same positions); every generation is
    measured on it, and ablations and tuning choose on it. The held-out test
    set (``test`` true): ``evaluate.test_positions_per_group`` a group, drawn
    with ``evaluate.test_positions_seed`` and never one of the validation
    set's positions (read from ``layout.positions``); only the champion is
    measured on it, for the tables that report a run.

    Where the package ships the set asked for (:func:`shipped_positions`:
    Connect Four's default sets) it is copied rather than labelled again,
    unless ``shipped`` is false; a test checks the copies against the solver."""
    game = p.make_game()
    scorer = perfect_scorer(game)
    e = p.evaluate
    n = e.test_positions_per_group if test else e.positions_per_group
    out = layout.test_positions if test else layout.positions
    if scorer is None or n == 0:
        why = "disabled" if scorer is not None else f"no perfect player for {game.name} here"
        empty = PositionSet(game.name, [], np.zeros((0, game.num_actions), np.int8))
        write_json(out, dict(empty.to_json(), note=why))
        return empty
    copy = shipped_copy(p, layout, test=test) if shipped else None
    if copy is not None:
        write_json(out, copy[1].to_json())
        return copy[1]
    exclude: set[tuple[int, int]] = set()
    if test:
        exclude = position_keys(game, PositionSet.from_json(read_json(layout.positions)))
    seed = e.test_positions_seed if test else e.positions_seed
    rng = np.random.default_rng(derive_seed(seed, "test_positions" if test else "positions"))
    ps = make_benchmark(game, n, rng, scorer, exclude=exclude, value=perfect_value(scorer))
    write_json(out, ps.to_json())
    return ps


def baselines(p: Params, has_perfect: bool) -> list[PlayerSpec]:
    """Random play, rollout UCT, and (tic-tac-toe) the perfect player, (Go,
    ``evaluate.gnugo_level``) GnuGo at each level asked for."""
    e = p.evaluate
    out = [PlayerSpec("random", "random"), PlayerSpec("uct", f"uct{e.uct_playouts}", playouts=e.uct_playouts)]
    if has_perfect and e.perfect_games and p.game == "tictactoe":
        out.append(PlayerSpec("perfect", "perfect"))  # Connect Four: error rate only (solving is slow)
    if p.game.startswith("go-"):
        out += [PlayerSpec("gnugo", f"gnugo{level}", level=level) for level in gnugo_levels(e.gnugo_level)]
    return out


def gnugo_levels(setting: int | list[int]) -> list[int]:
    """``evaluate.gnugo_level`` as the levels GnuGo plays at, each once, in
    the order given: 0 or [] is none."""
    levels = [setting] if isinstance(setting, int) else list(setting)
    return list(dict.fromkeys(x for x in levels if x))


#: positions per measuring task: fixed, so the moves a model is measured
#: with do not depend on how many workers searched them
MEASURE_CHUNK = 150


@dataclass(frozen=True)
class _MovesTask:
    params: Params
    model: str | ShippedFile
    states: list


def _moves_task(task: _MovesTask, tick: Tick) -> tuple[np.ndarray, list[int]]:
    out = _moves_here(task.params, local_file(task.model), task.states)
    tick(len(task.states))
    return out


def _moves_here(p: Params, path: str, states: list) -> tuple[np.ndarray, list[int]]:
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.engine.search import BatchedMCTS, search_moves

    game = p.make_game()
    net, _, _ = load_model(path, game)
    ev = NetworkEvaluator(game, net, p.runtime.device, precision=p.runtime.precision)
    priors, _ = ev(states)
    legal = np.stack([game.legal_mask(s) for s in states])
    policy_moves = np.where(legal, priors, -1).argmax(axis=1)
    mcts = BatchedMCTS(game, ev, p.match_search(p.evaluate), len(states), rng=np.random.default_rng(0))
    search, _ = search_moves(mcts, states)
    return policy_moves, search


def policy_and_search_moves(p: Params, path: str, states: list, *, workers: int | None = None,
                            progress: bool = False, desc: str = "positions") -> tuple[np.ndarray, list[int]]:
    """The moves a model plays in ``states`` as evaluation measures it: its raw
    policy's most likely legal move, and its search's move at
    ``evaluate.simulations`` with no noise, most visited or Gumbel's choice
    (:func:`~zeroloop.engine.search.search_moves`): a measurement, so never
    sampled at ``evaluate.temperature``.

    The positions are searched in tasks of :data:`MEASURE_CHUNK` over
    ``workers`` processes (default: ``runtime.workers``, else one per core),
    each task one batch, so the moves are the same for any number of workers."""
    if not states:
        return np.zeros(0, np.int64), []
    n = workers or p.runtime.workers or default_workers()
    with PinnedModels() as pins:  # every task measures the bytes that were there at the start
        tasks = _moves_tasks(p, pins.model(path), states)
        if n == 1 or len(tasks) == 1:  # no pool to start: the same tasks, here
            model = local_file(tasks[0].model)
            parts = [_moves_here(p, model, t.states) for t in tasks]
        else:
            parts = run_tasks(_moves_task, tasks, workers=n, total=len(states), desc=desc,
                              unit="position", progress=progress)
    return _joined(parts)


def _moves_tasks(p: Params, model: str | ShippedFile, states: list) -> list[_MovesTask]:
    """``states`` in tasks of :data:`MEASURE_CHUNK`, each naming ``model``
    as :class:`~zeroloop.pipeline.matches.PinnedModels` gives it."""
    return [_MovesTask(p, model, states[i:i + MEASURE_CHUNK]) for i in range(0, len(states), MEASURE_CHUNK)]


def _joined(parts: list[tuple[np.ndarray, list[int]]]) -> tuple[np.ndarray, list[int]]:
    return np.concatenate([pm for pm, _ in parts]), [m for _, sm in parts for m in sm]


def _evaluation_task(task: _MovesTask | MatchTask, tick: Tick):
    """A task of the evaluate stage's one pool: some positions to measure, or some games."""
    return _moves_task(task, tick) if isinstance(task, _MovesTask) else play_match_task(task, tick)


def solver_errors(p: Params, path: str, positions: PositionSet,
                  moves: tuple[np.ndarray, list[int]] | None = None, *, progress: bool = False,
                  desc: str = "positions") -> dict:
    """Error rates of the raw policy (most likely legal move) and of the search
    at ``evaluate.simulations`` (no noise), overall and per group, with the
    number of positions and of those where the choice matters. ``moves``: the
    model's (policy, search) moves from :func:`policy_and_search_moves`, where
    the caller already has them."""
    if moves is None:
        moves = policy_and_search_moves(p, path, positions.states(p.make_game()), progress=progress,
                                        desc=desc)
    policy_moves, search_moves = moves
    pol, srch = move_errors(positions, policy_moves), move_errors(positions, search_moves)
    matters, names = decisive(positions), np.asarray(positions.groups)
    groups = {}
    for (g, gp), gs in zip(group_errors(positions, policy_moves).items(),
                           group_errors(positions, search_moves).values(), strict=True):
        groups[g] = {"positions": gp.positions, "decisive": int(matters[names == g].sum()),
                     "policy_error_rate": round(gp.rate, 4), "search_error_rate": round(gs.rate, 4),
                     "policy_error_ci95": _rounded(gp.interval()),
                     "search_error_ci95": _rounded(gs.interval())}
    return {"positions": pol.positions, "decisive": int(matters.sum()),
            "simulations": p.evaluate.simulations, "policy_error_rate": round(pol.rate, 4),
            "search_error_rate": round(srch.rate, 4), "policy_error_ci95": _rounded(pol.interval()),
            "search_error_ci95": _rounded(srch.interval()), "groups": groups}


def _rounded(interval: tuple[float, float]) -> list[float]:
    return [round(interval[0], 4), round(interval[1], 4)]


def evaluate_step(p: Params, layout: Layout, gen: int, *, progress: bool = True) -> dict:
    """Generation ``gen``'s best model against the baselines and the previous
    generation's best (:func:`previous_best`), and its move error on the
    validation positions; written to the generation's ``eval.json``."""
    game = p.make_game()
    best = layout.model(gen)
    _, _, meta = load_model(best, game)
    origin = meta.get("origin", gen)
    if origin != gen and origin in p.generations:
        return _kept_best(p, layout, gen, origin)
    e = p.evaluate
    me = model_player(p, str(best), f"gen{origin}", e)
    result: dict = {"generation": gen, "model": f"gen{origin}", "simulations": p.evaluate.simulations}
    t0 = time.perf_counter()
    positions = PositionSet.from_json(read_json(layout.positions))
    has_perfect = len(positions.moves) > 0 or perfect_scorer(game) is not None
    # every match and the positions in one pool: one start, and no core idles
    # while the other finishes a match's last games (the games and moves are
    # those play_match and policy_and_search_moves give)
    workers = p.runtime.workers or default_workers()
    tasks: list = []
    matches: list[tuple[PlayerSpec, list[int]]] = []
    opponents = baselines(p, has_perfect)
    if (previous := previous_best(p, layout, gen)).name != me.name:
        opponents.append(previous)
    with PinnedModels() as pins:
        for k, opp in enumerate(opponents):
            if opp.kind == "gnugo" and find_gnugo() is None:
                print(f"[evaluate@{gen}] GnuGo is not installed, so no games against {opp.name} "
                      "(`make gnugo`, or set evaluate.gnugo_level: 0)", file=sys.stderr)
                continue
            seed = derive_seed(p.seed, "evaluate", gen) + k
            mine = match_tasks(game, pins.spec(me), pins.spec(opp),
                               match_openings(game, e.games, e.opening_plies, seed), seed=seed,
                               workers=workers)
            matches.append((opp, list(range(len(tasks), len(tasks) + len(mine)))))
            tasks += mine
        positioned = (_moves_tasks(p, pins.model(str(best)), positions.states(game))
                      if positions.moves else [])
        measured = list(range(len(tasks), len(tasks) + len(positioned)))
        tasks += positioned
        # the long tasks first (rollout UCT, GnuGo), the positions, then the quick games against random
        quick = {i for opp, ids in matches if opp.kind == "random" for i in ids}
        order = sorted(range(len(tasks)), key=lambda i: (i in quick, i in measured))
        units = sum(2 * len(t.openings) if isinstance(t, MatchTask) else len(t.states) for t in tasks)
        done = run_tasks(_evaluation_task, [tasks[i] for i in order], workers=workers, total=units,
                         desc=f"evaluate@{gen} (games and positions)", unit="item", progress=progress)
    out = dict(zip(order, done, strict=True))
    for opp, ids in matches:
        m = MatchResult(me.name, opp.name)
        for i in ids:
            m.games.extend(out[i])
        s = m.score
        lo, hi = s.interval(0.95)
        key = {"uct": "uct", "mcts": "previous"}.get(opp.kind, opp.name)
        result[f"vs_{key}"] = {"opponent": opp.name, "score": round(s.score, 4), "ci95_low": round(lo, 4),
                               "ci95_high": round(hi, 4), "wins": s.wins, "draws": s.draws,
                               "losses": s.losses}
    if positions.moves:
        result["solver"] = solver_errors(p, str(best), positions, _joined([out[i] for i in measured]))
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    result.update(process_clock())  # the whole stage, start-up included: the report's split of the run
    result["machine"] = machine(p.runtime.device, p.runtime.precision)
    write_json(layout.report(gen, "eval"), result)
    return result


def previous_best(p: Params, layout: Layout, gen: int) -> PlayerSpec:
    """The previous generation's best model, searched as this evaluation
    searches (``gen<origin>``, the generation that trained it): the one
    opponent whose games link this generation's rating to the last one's.
    Against the fixed baselines a strong model wins every game, which bounds
    nothing (Elo needs an anchor the games can inform); through these games
    the chain of best models reaches back to the generations that the
    anchor does measure. ``evaluate@g`` plays only where the gate took a new
    model, so in a run the two are never the same model (where they are,
    the caller plays no games against it)."""
    prev = p.generations[gen].prev
    path = layout.model(prev)
    _, _, meta = load_model(path, p.make_game())
    return model_player(p, str(path), f"gen{meta.get('origin', prev)}", p.evaluate)


def _kept_best(p: Params, layout: Layout, gen: int, origin: int) -> dict:
    """The evaluation of a generation whose gate kept the best model of
    generation ``origin``: the same bytes (the gate copies them), which
    ``evaluate@origin`` measures with the same settings, so nothing is played
    again. ``same_as`` points the report at that measurement; the games count
    once in the Elo fit."""
    result = {"generation": gen, "model": f"gen{origin}", "simulations": p.evaluate.simulations,
              "same_as": origin, "wall_s": 0.0, **process_clock(),
              "machine": machine(p.runtime.device, p.runtime.precision)}
    write_json(layout.report(gen, "eval"), result)
    return result


def test_step(p: Params, layout: Layout, model: str | Path) -> dict:
    """The move error of ``model`` (the champion) on the held-out test
    positions: raw policy and search at ``evaluate.simulations``, overall and
    per group, written to ``layout.test_report``; a note instead where the set
    is empty."""
    game = p.make_game()
    positions = PositionSet.from_json(data := read_json(layout.test_positions))
    _, _, meta = load_model(model, game)
    result: dict = {"set": "test", "positions_seed": p.evaluate.test_positions_seed,
                    "model": f"gen{meta.get('origin', p.last_generation)}"}
    t0 = time.perf_counter()
    if positions.moves:
        result["solver"] = solver_errors(p, str(model), positions)
    else:
        result["note"] = f"no held-out test positions ({data.get('note', 'an empty set')})"
    # milliseconds: a small set on a fast CPU takes under 0.05 s, which tenths would call 0
    result["wall_s"] = round(time.perf_counter() - t0, 3)
    result["machine"] = machine(p.runtime.device, p.runtime.precision)
    write_json(layout.test_report, result)
    return result
