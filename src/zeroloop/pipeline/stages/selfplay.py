"""selfplay@g: games of the current best model against itself, as shards in data/gen_g/."""

from __future__ import annotations

from zeroloop.engine.nn.machine import summary_line
from zeroloop.pipeline.generation import selfplay_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work


def run(p: Params, gen: int, prev: int) -> None:
    summary, samples = selfplay_step(p, LAYOUT, gen, prev)
    what = "the self-play metrics and sample games"
    with logging_after_work(f"selfplay@{gen}", what), Tracker.open(p) as tr:
        tr.log_stage(gen, "selfplay", summary, LAYOUT)
        tr.log_text(gen, "\n".join(samples) + "\n", f"selfplay_sample_games_gen{gen}.txt")
    say(f"selfplay@{gen}", f"{summary['games']} games, {summary['positions']} positions, "
                           f"{summary['wall_s']:.0f}s -> {LAYOUT.data(gen)}")
    say(f"selfplay@{gen}", summary_line(summary["machine"], p.runtime.precision))
