"""evaluate@g: the generation's best model against the baselines, and its
move error rate on the solver-labelled positions."""

from __future__ import annotations

from zeroloop.pipeline.evaluation import evaluate_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking import Tracker, stage_metrics


def run(p: Params, gen: int) -> None:
    result = evaluate_step(p, LAYOUT, gen)
    flat = stage_metrics("evaluate", result)
    with Tracker.open(p) as tr:
        tr.log_stage(gen, "evaluate", result, LAYOUT)
        tr.log_summary({k.replace("eval/", ""): v for k, v in flat.items() if k != "eval/positions"},
                       step=gen)
    lines = [f"{v['opponent']} {v['score']:.0%}" for v in result.values()
             if isinstance(v, dict) and "opponent" in v]
    if "solver" in result:
        lines.append(f"solver error {result['solver']['search_error_rate']:.1%} "
                     f"(policy {result['solver']['policy_error_rate']:.1%})")
    say(f"evaluate@{gen}", f"{result['model']} vs " + ", ".join(lines))
