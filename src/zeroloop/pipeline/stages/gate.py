"""gate@g: the candidate against the best model; it becomes the best only when
it scores at least ``gate.threshold`` (wins + half the draws), or when the
sequential test ``gate.sprt`` accepts it (docs/gate.md)."""

from __future__ import annotations

from zeroloop.engine.nn.machine import summary_line
from zeroloop.pipeline.generation import gate_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work


def run(p: Params, gen: int, prev: int) -> None:
    result, _ = gate_step(p, LAYOUT, gen, prev)
    with logging_after_work(f"gate@{gen}", "the gate's metrics"), Tracker.open(p) as tr:
        tr.log_stage(gen, "gate", result, LAYOUT)
        tr.log_summary({"gate_score": result["score"], "gate_accepted": result["accepted"]}, step=gen)
    verdict = "accepted: new best" if result["accepted"] else f"rejected: {result['opponent']} stays best"
    if result["sprt"] != "off":  # which rule decided: the test's verdict, or the threshold when games ran out
        verdict += f" (SPRT: {result['sprt']})" if result["sprt"] != "continue" else " (SPRT: no verdict)"
    say(f"gate@{gen}", f"candidate scored {result['score']:.1%} [{result['ci95_low']:.1%}, "
                       f"{result['ci95_high']:.1%}] in {result['games']} games (+{result['wins']} "
                       f"={result['draws']} -{result['losses']}); {verdict}")
    say(f"gate@{gen}", summary_line(result["machine"], p.runtime.precision))
