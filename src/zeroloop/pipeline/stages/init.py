"""init: the randomly initialised network of generation 0 and an empty replay window."""

from __future__ import annotations

from zeroloop.pipeline.generation import init_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say


def run(p: Params) -> None:
    summary = init_step(p, LAYOUT)
    say("init", f"{p.game}: random {p.net.config().shape} network ({summary['weights']:,} weights) "
                f"-> {LAYOUT.model(0)}")
