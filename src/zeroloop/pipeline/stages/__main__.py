"""``python -m zeroloop.pipeline.stages STAGE [--gen G --prev P]``: what dvc.yaml runs."""

from __future__ import annotations

import argparse
import sys

STAGES = ("check", "init", "positions", "test_positions", "selfplay", "train", "gate", "evaluate", "report")
PER_GENERATION = ("selfplay", "train", "gate", "evaluate")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zeroloop.pipeline.stages",
                                 description="Run one pipeline stage (dvc.yaml calls these).")
    ap.add_argument("stage", choices=STAGES)
    ap.add_argument("--gen", type=int, help="generation (per-generation stages)")
    ap.add_argument("--prev", type=int, help="the previous generation (selfplay, train, gate; evaluate: "
                                              "checked against params when given)")
    ap.add_argument("--params", default="params.yaml", help="params file (default params.yaml)")
    args = ap.parse_args(argv)
    if args.stage in PER_GENERATION and args.gen is None:
        ap.error(f"{args.stage} needs --gen")
    if args.stage in ("selfplay", "train", "gate") and args.prev is None:
        ap.error(f"{args.stage} needs --prev")

    import importlib

    from zeroloop.pipeline.stages.common import run_stage

    module = importlib.import_module(f"zeroloop.pipeline.stages.{args.stage.removeprefix('test_')}")

    def body(params):
        if args.gen is not None and args.gen not in params.generations:
            raise ValueError(f"generation {args.gen} is not in {args.params} (generations: "
                             f"{', '.join(map(str, sorted(params.generations)))})")
        if args.prev is not None and args.prev != params.generations[args.gen].prev:
            raise ValueError(f"--prev {args.prev} does not match {args.params}: generation {args.gen} "
                             f"follows generation {params.generations[args.gen].prev}")
        if args.stage in ("selfplay", "train", "gate"):
            module.run(params, args.gen, args.prev)
        elif args.stage == "evaluate":
            module.run(params, args.gen)
        elif args.stage == "test_positions":
            module.run(params, test=True)
        else:
            module.run(params)

    name = f"{args.stage}@{args.gen}" if args.gen is not None else args.stage
    return run_stage(name, body, args.params, writes=args.stage != "check",
                     tracked=args.stage in (*PER_GENERATION, "report"))


if __name__ == "__main__":
    from zeroloop.pipeline.runtime.process import start_up_without_collection

    start_up_without_collection()  # run_stage turns it on when the stage's work begins
    sys.exit(main())
