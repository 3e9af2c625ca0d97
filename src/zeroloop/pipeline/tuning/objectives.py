"""What a trial measures: the sampled settings, and the scores of the
*search* objective (a fixed model under the sampled search settings against a
fixed reference, or on solver-labelled positions) and of the *selfplay*
objective (a short training run by the pipeline's generation steps).

Every trial of a study plays the same seeded openings (common random numbers),
so differences between trials are not opening luck. Games are played in
``tune.rounds`` rounds; after each the running score is reported so a pruner
can stop a poor trial early.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from zeroloop.engine.search import MoveSchedule, SearchConfig
from zeroloop.pipeline.matches import PlayerSpec, play_match
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.params.schema import TuneParams


@dataclass(frozen=True)
class TrialSettings:
    c_puct: float
    temperature: float
    temperature_moves: int
    dirichlet_alpha: float | None = None  # selfplay objective, when tune: has a range for it
    dirichlet_epsilon: float | None = None
    simulations: int | None = None  # selfplay objective, with tune.selfplay_simulations

    @property
    def schedule(self) -> MoveSchedule:
        return MoveSchedule(temperature=self.temperature, temperature_moves=self.temperature_moves)

    def as_params(self) -> dict[str, Any]:
        out = {"c_puct": self.c_puct, "temperature": self.temperature,
               "temperature_moves": self.temperature_moves}
        for key in ("dirichlet_alpha", "dirichlet_epsilon", "simulations"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def noise_dims(space: TuneParams, objective: str) -> list[str]:
    """The Dirichlet noise dimensions tuned: only self-play searches with root noise."""
    if objective != "selfplay":
        return []
    return [k for k in ("dirichlet_alpha", "dirichlet_epsilon") if getattr(space, k) is not None]


def tunes_simulations(space: TuneParams, objective: str) -> bool:
    """Whether self-play's simulations per move are a dimension: the selfplay
    objective with a ``tune.selfplay_simulations`` range."""
    return objective == "selfplay" and space.selfplay_simulations is not None


def selfplay_games(games: int, simulations: int, default_simulations: int) -> int:
    """Games a generation plays at ``simulations`` per move so that it searches
    as much as ``games`` at ``default_simulations``: games x simulations kept
    (rounded; at least 2, one colour-balanced pair)."""
    return max(2, round(games * default_simulations / simulations))


def suggest(trial, space: TuneParams, objective: str = "search") -> TrialSettings:
    """Sample one point of the search space (optuna ``Trial``)."""
    noise = {k: trial.suggest_float(k, getattr(space, k).low, getattr(space, k).high,
                                    log=getattr(space, k).log)
             for k in noise_dims(space, objective)}
    if tunes_simulations(space, objective):
        r = space.selfplay_simulations
        noise["simulations"] = trial.suggest_int("simulations", max(1, r.low), r.high, log=True)
    return TrialSettings(
        c_puct=trial.suggest_float("c_puct", space.c_puct.low, space.c_puct.high, log=space.c_puct.log),
        temperature=trial.suggest_float("temperature", space.temperature.low, space.temperature.high),
        temperature_moves=trial.suggest_int("temperature_moves", space.temperature_moves.low,
                                            space.temperature_moves.high), **noise)


def reference_player(space: TuneParams) -> PlayerSpec:
    if space.reference == "uct":
        return PlayerSpec("uct", f"uct{space.reference_playouts}", playouts=space.reference_playouts)
    return PlayerSpec(space.reference, space.reference)


def candidate_player(params: Params, model: str, settings: TrialSettings, name: str = "candidate"
                     ) -> PlayerSpec:
    return PlayerSpec("mcts", name, model=model, search=trial_search(params, settings),
                      schedule=settings.schedule, device=params.runtime.device,
                      precision=params.runtime.precision)


def trial_search(params: Params, settings: TrialSettings) -> SearchConfig:
    """``mcts``'s settings with the trial's c_puct at ``tune.simulations``."""
    return replace(params.mcts.config(), simulations=params.tune.simulations, c_puct=settings.c_puct)


def _current_settings(params: Params, objective: str) -> dict[str, tuple[str, str, float, Any]]:
    """Per tuned dimension (a :class:`TrialSettings` field): the params.yaml
    key it comes from, its range's name under ``tune:``, the value params.yaml
    runs now and the range."""
    space = params.tune
    section = "selfplay" if objective == "selfplay" else "evaluate"
    src = getattr(params, section)
    current = {"c_puct": ("mcts.c_puct", "c_puct", params.mcts.c_puct, space.c_puct),
               "temperature": (f"{section}.temperature", "temperature", src.temperature, space.temperature),
               "temperature_moves": (f"{section}.temperature_moves", "temperature_moves",
                                     src.temperature_moves, space.temperature_moves)}
    for k in noise_dims(space, objective):
        current[k] = (f"mcts.{k}", k, getattr(params.mcts, k), getattr(space, k))
    if tunes_simulations(space, objective):
        current["simulations"] = ("mcts.simulations", "selfplay_simulations", params.mcts.simulations,
                                  space.selfplay_simulations)
    return current


def _clip(value, r):
    return min(max(value, r.low), r.high)


def default_settings(params: Params, objective: str) -> TrialSettings:
    """The settings params.yaml uses now, clipped into the search space."""
    ints = ("temperature_moves", "simulations")
    return TrialSettings(**{field: int(_clip(v, r)) if field in ints else _clip(v, r)
                            for field, (_, _, v, r) in _current_settings(params, objective).items()})


def clipped_defaults(params: Params, objective: str) -> list[str]:
    """The current settings that lie outside their ``tune:`` range, as
    ``key value -> clipped``: trial 0 then plays the clipped value, not what
    params.yaml runs, and a gain over it is not a gain over the defaults."""
    return [f"{key} {v:g} is outside tune.{name} [{r.low:g}, {r.high:g}], so trial 0 plays {_clip(v, r):g}"
            for key, name, v, r in _current_settings(params, objective).values() if not r.low <= v <= r.high]


def search_objective_score(params: Params, model: str, settings: TrialSettings, *, seed: int,
                           report=None, workers: int | None = None, progress: bool = False) -> float:
    """Score of ``model`` searched with ``settings`` against the reference.

    ``report(score_so_far, round, round_score)`` is called after each round;
    it may raise to stop the trial (Optuna's ``TrialPruned``).
    """
    game = params.make_game()
    space = params.tune
    me = candidate_player(params, model, settings)
    ref = reference_player(space)
    pairs = space.games // 2
    per_round = max(1, math.ceil(pairs / space.rounds))
    points = games = 0.0
    for r, start in enumerate(range(0, pairs, per_round)):
        n = min(per_round, pairs - start)
        # round r always gets the same openings and seeds, whatever the settings
        m = play_match(game, me, ref, games=2 * n, opening_plies=space.opening_plies,
                       seed=int(np.random.SeedSequence([seed, r]).generate_state(1)[0]),
                       workers=workers, progress=progress, desc=f"round {r + 1}")
        s = m.score
        points += s.wins + s.draws / 2
        games += s.games
        if report is not None:
            report(points / games, r, (s.wins + s.draws / 2) / s.games)
    return points / games


def solver_position_set(params: Params, seed: int, count: int | None = None, salt: int = 0x501):
    """Positions labelled by a perfect player (the same for every trial of a
    study with this seed): random lines, kept where the choice matters
    (Othello: endgames, at least ``count`` of them, half per group)."""
    from zeroloop.engine.perfect import perfect_scorer
    from zeroloop.engine.positions import OTHELLO_GROUPS, make_othello_endgame_set, make_position_set

    game = params.make_game()
    scorer = perfect_scorer(game)
    if scorer is None:
        raise ValueError(f"tune.metric: solver needs a perfect player for {game.name}: tic-tac-toe, "
                         "Othello (endgames), or Connect Four with the solver extra "
                         "(pip install -e '.[solver]')")
    rng = np.random.default_rng(np.random.SeedSequence([seed, salt]))
    count = count or params.tune.solver_positions
    if game.name.startswith("othello"):  # the solver labels endgames only
        return make_othello_endgame_set(game, -(-count // len(OTHELLO_GROUPS)), rng, scorer)
    return make_position_set(game, count, rng, scorer)


def validation_position_set(params: Params, root: str | Path = "."):
    """The pipeline's validation positions (``data/positions.json`` under
    ``root``, as ``dvc repro positions`` made them): what ``tune.metric:
    validation`` scores on. The held-out test set is never read."""
    from zeroloop.engine.positions import PositionSet
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import read_json

    path = Layout(Path(root)).positions
    if not path.is_file():
        raise ValueError(f"tune.metric: validation scores on {path}, which does not exist yet; "
                         "`dvc repro positions` makes it")
    ps = PositionSet.from_json(read_json(path))
    if ps.game != params.game:
        raise ValueError(f"tune.metric: validation: {path} holds {ps.game} positions, not {params.game}")
    if not ps.moves:
        raise ValueError(f"tune.metric: validation: {path} has no positions "
                         "(evaluate.positions_per_group 0?)")
    return ps


def metric_positions(params: Params, seed: int):
    """The positions a solver-scored study measures on: fresh ones
    (``tune.metric: solver``) or the pipeline's validation set (``validation``)."""
    if params.tune.metric == "validation":
        return validation_position_set(params)
    return solver_position_set(params, seed)


def trial_moves(params: Params, model: str, settings: TrialSettings, states: list, *, seed: int
                ) -> Iterator[tuple[np.ndarray, list[int]]]:
    """The moves ``model`` plays in ``states`` under the trial's ``settings``,
    as play would choose them (:func:`~zeroloop.engine.search.search_moves`):
    Gumbel's sequential-halving winner, or under PUCT sampled from the visits
    at ``temperature`` on plies below ``temperature_moves``, else the most
    visited. Yields ``(rows, moves)`` for each of ``tune.rounds`` batches."""
    from zeroloop.engine.nn import NetworkEvaluator
    from zeroloop.engine.search import BatchedMCTS, search_moves
    from zeroloop.pipeline.data.storage import load_model

    game = params.make_game()
    net, _, _ = load_model(model, game)
    ev = NetworkEvaluator(game, net, params.runtime.device, precision=params.runtime.precision)
    cfg = trial_search(params, settings)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5C0]))
    for chunk in np.array_split(np.arange(len(states)), min(params.tune.rounds, len(states))):
        mcts = BatchedMCTS(game, ev, cfg, len(chunk), rng=rng)
        moves, _ = search_moves(mcts, [states[i] for i in chunk], settings.schedule, rng)
        yield chunk, moves


def solver_correct(params: Params, model: str, settings: TrialSettings, positions, *, seed: int,
                   report=None) -> np.ndarray:
    """Whether the move played (:func:`trial_moves`) keeps the position's
    result, per position; ``report(score_so_far, round, round_score)``
    follows each of ``tune.rounds`` batches."""
    from zeroloop.engine.positions import move_mistakes

    correct = np.zeros(len(positions.moves), bool)
    seen = 0
    batches = trial_moves(params, model, settings, positions.states(params.make_game()), seed=seed)
    for r, (chunk, moves) in enumerate(batches):
        mistakes = move_mistakes(positions.subset(chunk), moves)
        correct[chunk] = ~mistakes
        seen += len(chunk)
        if report is not None:  # the round's score as 1 - error rate, the form the pruner always saw
            report(float(correct[:seen].mean()), r, 1.0 - int(mistakes.sum()) / len(chunk))
    return correct


def model_score(params: Params, model: str, settings: TrialSettings, *, seed: int, report=None,
                workers: int | None = None, positions=None, keep=None) -> float:
    """``tune.metric``: the match score against the reference, or the share
    of solver-labelled positions where the searched move keeps the result;
    then ``keep`` (if given) gets the per-position booleans, which pair two
    trials position by position (:func:`encode_correct`)."""
    if params.tune.metric in ("solver", "validation"):
        positions = positions if positions is not None else metric_positions(params, seed)
        correct = solver_correct(params, model, settings, positions, seed=seed, report=report)
        if keep is not None:
            keep(correct)
        return float(correct.mean())
    return search_objective_score(params, model, settings, seed=seed, report=report, workers=workers)


def encode_correct(correct) -> str:
    """Per-position booleans as a string of 0s and 1s (an Optuna user attribute)."""
    return "".join("1" if c else "0" for c in correct)


def decode_correct(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), np.uint8) == ord("1")


def selfplay_objective_score(params: Params, settings: TrialSettings, workdir: str | Path, *, seed: int,
                             report=None, workers: int | None = None, keep=None) -> float:
    """Train a fresh network for ``tune.selfplay_generations`` generations of
    ``tune.selfplay_games`` games with the sampled self-play settings, by the
    pipeline's own generation steps (init, self-play, train, gate) under
    ``workdir``, then score the best model like the search objective with the
    default search settings. ``report(score, generation, score)`` follows
    each generation."""
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.generation import gate_step, init_step, selfplay_step, train_step
    from zeroloop.pipeline.runtime.process import quiet_libraries
    from zeroloop.pipeline.training import module  # noqa: F401 - Lightning, imported before quieting it

    quiet_libraries()  # again, now: importing Lightning sets its logger back to INFO
    p = trial_params(params, settings, seed, workers)
    layout = Layout(Path(workdir))
    default = TrialSettings(c_puct=params.mcts.c_puct, temperature=0.0, temperature_moves=0)
    positions = metric_positions(params, seed) if params.tune.metric in ("solver", "validation") else None
    init_step(p, layout)
    score = 0.0
    for gen in sorted(p.generations):
        prev = gen - 1
        selfplay_step(p, layout, gen, prev, progress=False)
        train_step(p, layout, gen, prev, progress=False)
        gate_step(p, layout, gen, prev, progress=False)
        last = gen == p.last_generation  # only the final model's per-position results are kept
        score = model_score(params, str(layout.model(gen)), default, seed=seed, workers=workers,
                            positions=positions, keep=keep if last else None)
        if report is not None:
            report(score, gen, score)
    return score


def trial_params(params: Params, settings: TrialSettings, seed: int, workers: int | None) -> Params:
    """params.yaml as one selfplay trial runs it: the sampled self-play
    settings, ``tune.selfplay_games`` games for ``tune.selfplay_generations``
    generations (scaled by :func:`selfplay_games` where the trial samples the
    simulations), the study's seed."""
    from zeroloop.pipeline.params.schema import GenerationParams

    space = params.tune
    mcts = {"c_puct": settings.c_puct}
    mcts.update({k: getattr(settings, k) for k in ("dirichlet_alpha", "dirichlet_epsilon", "simulations")
                 if getattr(settings, k) is not None})
    games = space.selfplay_games
    if settings.simulations is not None:
        games = selfplay_games(games, settings.simulations, params.mcts.simulations)
    return params.model_copy(update={
        "seed": seed,
        "mcts": params.mcts.model_copy(update=mcts),
        "selfplay": params.selfplay.model_copy(update={
            "games": games, "temperature": settings.temperature,
            "temperature_moves": settings.temperature_moves}),
        "generations": {g: GenerationParams(prev=g - 1) for g in range(1, space.selfplay_generations + 1)},
        "runtime": params.runtime.model_copy(update={"workers": workers or 0}),
    })
