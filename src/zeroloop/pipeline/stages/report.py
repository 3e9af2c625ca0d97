"""report: the run's summary over all generations - Elo ratings, metrics,
plots, the champion model - and its registration in MLflow."""

from __future__ import annotations

from zeroloop.pipeline.params import Params
from zeroloop.pipeline.report import log_report, report_lines, report_step
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.tracking.runs import Tracker


def run(p: Params) -> None:
    report = report_step(p, LAYOUT)
    with Tracker.open(p) as tr:
        version = log_report(tr, LAYOUT, report)
    for line in report_lines(p, LAYOUT, report, version):
        say("report", line)
