"""positions: test positions labelled by a perfect player (tic-tac-toe always,
Connect Four with the ``solver`` extra); an empty set where none exists."""

from __future__ import annotations

from zeroloop.pipeline.data.storage import read_json
from zeroloop.pipeline.evaluation import positions_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say


def run(p: Params) -> None:
    ps = positions_step(p, LAYOUT)
    if ps.moves:
        say("positions", f"{len(ps.moves)} labelled {p.game} positions -> {LAYOUT.positions}")
    else:
        say("positions", f"no test positions ({read_json(LAYOUT.positions)['note']})")
