"""check: params.yaml is whole and valid (run_stage validates it before this body)."""

from __future__ import annotations

from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import say


def run(p: Params) -> None:
    say("check", f"params.yaml is valid: {p.game}, {len(p.generations)} generations, params key "
                 f"{p.fingerprint()}")
