"""evaluate@g: the generation's best model against the baselines, and its
move error rate on the solver-labelled positions."""

from __future__ import annotations

from zeroloop.engine.nn.machine import summary_line
from zeroloop.pipeline.data.storage import read_json
from zeroloop.pipeline.evaluation import evaluate_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.report import resolved_eval
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work, stage_metrics


def run(p: Params, gen: int) -> None:
    result = evaluate_step(p, LAYOUT, gen)
    origin = result.get("same_as")
    if origin is not None and LAYOUT.report(origin, "eval").is_file():
        # the gate kept an earlier best: its results again at this step, for the curves
        result = resolved_eval(result, {origin: read_json(LAYOUT.report(origin, "eval"))}, LAYOUT)
    flat = stage_metrics("evaluate", result)
    with logging_after_work(f"evaluate@{gen}", "the evaluation's metrics"), Tracker.open(p) as tr:
        tr.log_stage(gen, "evaluate", result, LAYOUT)
        tr.log_summary({k.replace("eval/", ""): v for k, v in flat.items() if k != "eval/positions"},
                       step=gen)
    if origin is not None:
        say(f"evaluate@{gen}", f"the gate kept {result['model']}, measured by evaluate@{origin} with these "
                               "settings: nothing played again")
        return
    lines = [f"{v['opponent']} {v['score']:.0%}" for v in result.values()
             if isinstance(v, dict) and "opponent" in v]
    if "solver" in result:
        s = result["solver"]
        lines.append(f"move error with {s['simulations']} simulations {s['search_error_rate']:.1%}, "
                     f"raw policy {s['policy_error_rate']:.1%} ({s['positions']} positions)")
    say(f"evaluate@{gen}", f"{result['model']} vs " + ", ".join(lines))
    say(f"evaluate@{gen}", summary_line(result["machine"], p.runtime.precision))
    if len(result.get("solver", {}).get("groups", {})) > 1:
        for group, g in result["solver"]["groups"].items():
            say(f"evaluate@{gen}", f"  {group:14s} search {g['search_error_rate']:6.1%}  raw policy "
                                   f"{g['policy_error_rate']:6.1%}  ({g['positions']} positions)")
