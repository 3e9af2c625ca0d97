"""train@g: a candidate network trained from the previous best on the replay window."""

from __future__ import annotations

from zeroloop.pipeline.generation import train_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work


def run(p: Params, gen: int, prev: int) -> None:
    # Lightning only now, after run_stage's checks: a stage refused for its params, its
    # folders or its MLflow store ends in a few seconds, not after Lightning's import
    # (10 CPU-seconds on a Zen 3). Importing it resets its log level: quiet it again.
    import torch

    import zeroloop.pipeline.training.module  # noqa: F401
    from zeroloop.pipeline.runtime.backend import local_cores
    from zeroloop.pipeline.runtime.process import quiet_libraries

    quiet_libraries()

    torch.set_num_threads(local_cores())  # the only busy process now
    with Tracker.open(p) as tr:
        tr.fresh_generation_run(gen, LAYOUT, "train")  # a rerun replaces its loss curves, never mixes them
        summary = train_step(p, LAYOUT, gen, prev, logger=tr.lightning_logger(gen))
        with logging_after_work(f"train@{gen}", "the training summary"):
            tr.log_stage(gen, "train", summary, LAYOUT)
    say(f"train@{gen}", f"{summary['samples']} positions from generations {summary['window']}, "
                        f"loss {summary.get('train_loss', float('nan')):.3f}, {summary['wall_s']:.0f}s")
