"""positions: validation positions labelled by a perfect player (tic-tac-toe
always, Connect Four with the ``solver`` extra), measured every generation; an
empty set where none exists. ``--test``: the held-out test set, kept apart
from the validation set and measured on the champion only."""

from __future__ import annotations

from zeroloop.pipeline.data.storage import read_json
from zeroloop.pipeline.evaluation import positions_step, shipped_copy
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say


def run(p: Params, *, test: bool = False) -> None:
    ps = positions_step(p, LAYOUT, test=test)
    name, path = ("test_positions", LAYOUT.test_positions) if test else ("positions", LAYOUT.positions)
    kind = "held-out test" if test else "validation"
    if ps.moves:
        copy = shipped_copy(p, LAYOUT, test=test)  # what positions_step took, where it took one
        source = f" (copied from {copy[0].name}, shipped labelled by the solver)" if copy else ""
        say(name, f"{len(ps.moves)} labelled {p.game} {kind} positions -> {path}{source}")
    else:
        say(name, f"no {kind} positions ({read_json(path)['note']})")
