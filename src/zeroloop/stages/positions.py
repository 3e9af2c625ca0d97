"""positions: test positions labelled by a perfect player (tic-tac-toe always,
Connect Four with the ``solver`` extra); an empty set where none exists."""

from __future__ import annotations

import numpy as np

from zeroloop.config import Params
from zeroloop.evaluate import PositionSet, make_position_set, perfect_scorer
from zeroloop.stages.common import POSITIONS, derive_seed, say, write_json


def run(p: Params) -> None:
    game = p.make_game()
    scorer = perfect_scorer(game)
    if scorer is None or p.evaluate.solver_positions == 0:
        why = "disabled" if scorer is not None else f"no perfect player for {game.name} here"
        write_json(POSITIONS, dict(PositionSet(game.name, [], np.zeros((0, game.num_actions), np.int8))
                                   .to_json(), note=why))
        say("positions", f"no test positions ({why})")
        return
    rng = np.random.default_rng(derive_seed(p.seed, "positions"))
    ps = make_position_set(game, p.evaluate.solver_positions, rng, scorer)
    write_json(POSITIONS, ps.to_json())
    say("positions", f"{len(ps.moves)} labelled {game.name} positions -> {POSITIONS}")
