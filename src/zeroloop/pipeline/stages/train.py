"""train@g: a candidate network trained from the previous best on the replay window."""

from __future__ import annotations

# Lightning first, before run_stage quiets the libraries (importing it resets its log level)
import zeroloop.pipeline.training.module  # noqa: F401
from zeroloop.pipeline.generation import train_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work


def run(p: Params, gen: int, prev: int) -> None:
    import torch

    from zeroloop.pipeline.runtime.backend import local_cores

    torch.set_num_threads(local_cores())  # the only busy process now
    with Tracker.open(p) as tr:
        tr.fresh_generation_run(gen, LAYOUT, "train")  # a rerun replaces its loss curves, never mixes them
        summary = train_step(p, LAYOUT, gen, prev, logger=tr.lightning_logger(gen))
        with logging_after_work(f"train@{gen}", "the training summary"):
            tr.log_stage(gen, "train", summary, LAYOUT)
    say(f"train@{gen}", f"{summary['samples']} positions from generations {summary['window']}, "
                        f"loss {summary.get('train_loss', float('nan')):.3f}, {summary['wall_s']:.0f}s")
