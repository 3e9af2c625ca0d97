"""train@g: a candidate network trained from the previous best on the replay window."""

from __future__ import annotations

from zeroloop.pipeline.generation import train_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker, logging_after_work


def flush_denormals() -> bool:
    """Compute denormal floats as zero (x86's flush-to-zero and denormals-are-zero) in this
    thread and in the threads it starts from now on. Weights that decay under L2 can turn
    denormal, and on a CPU each operation on one is about 10x slower: round 34's batch-128
    runs trained up to 2.3x slower a generation for it (docs/lab/notebook.md). The default's runs
    hold no denormal weights and train to the same bytes either way. Returns whether every
    thread of a parallel operation flushed (False: the CPU cannot, or a thread pool started
    before this call and keeps its own setting)."""
    import torch

    if not torch.set_flush_denormal(True):
        return False
    # the smallest denormal, made from its bits (a float made under the flag is already zero),
    # in a tensor large enough to be split across the pool's threads
    tiny = torch.ones(1 << 20, dtype=torch.int32).view(torch.float32)
    return bool(((tiny * 1.0) == 0).all())


def run(p: Params, gen: int, prev: int) -> None:
    # Lightning only now, after run_stage's checks: a stage refused for its params, its
    # folders or its MLflow store ends in a few seconds, not after Lightning's import
    # (10 CPU-seconds on a Zen 3). Importing it resets its log level: quiet it again.
    import torch

    import zeroloop.pipeline.training.module  # noqa: F401
    from zeroloop.pipeline.runtime.backend import local_cores
    from zeroloop.pipeline.runtime.process import quiet_libraries

    quiet_libraries()

    if not flush_denormals():  # before the thread pool starts: its threads inherit the setting
        say(f"train@{gen}", "denormal floats are not flushed in every thread (this CPU cannot, or torch's "
                            "thread pool started first): weights that decay towards zero train slower")
    torch.set_num_threads(local_cores())  # the only busy process now
    with Tracker.open(p) as tr:
        tr.fresh_generation_run(gen, LAYOUT, "train")  # a rerun replaces its loss curves, never mixes them
        summary = train_step(p, LAYOUT, gen, prev, logger=tr.lightning_logger(gen))
        with logging_after_work(f"train@{gen}", "the training summary"):
            tr.log_stage(gen, "train", summary, LAYOUT)
    say(f"train@{gen}", f"{summary['samples']} positions from generations {summary['window']}, "
                        f"loss {summary.get('train_loss', float('nan')):.3f}, {summary['wall_s']:.0f}s")
