"""The report step: the run's summary over all generations.

It fits Elo ratings to every generation's games, builds the per-generation
table (``reports/plots/generations.csv``) and its plots, copies the last best
model to the champion, measures it on the held-out test positions and writes
``reports/metrics.json``; :func:`log_report` mirrors it all into MLflow and
registers the champion. The ``report`` stage wraps the two.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from zeroloop.engine.nn.machine import summary_line
from zeroloop.engine.rating import EloFit, fit_league, unbounded_side
from zeroloop.pipeline.data.catalogue import SHIPPED_DIR
from zeroloop.pipeline.data.layout import Layout
from zeroloop.pipeline.data.storage import atomic_write_bytes, load_model, read_json, write_json
from zeroloop.pipeline.evaluation import test_step
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.plots import draw_plots
from zeroloop.pipeline.tracking.runs import Tracker, flatten

#: the shipped default runs' curves (models/reference/<game>.csv; provenance in models/README.md) ...
REFERENCE_DIR = SHIPPED_DIR / "reference"
#: ... compare with a run measured the same way: the validation set and the search budget
REFERENCE_MEASURE = {"positions_per_group": 100, "positions_seed": 0, "simulations": 200}
#: the stages whose time counts as training (evaluation does not)
TRAINING_STAGES = ("selfplay", "train", "gate")


def collect(p: Params, layout: Layout) -> list[dict]:
    """Every generation's reports, in order: ``{"selfplay": ..., "train": ...,
    "gate": ..., "eval": ...}`` each."""
    gens = sorted(p.generations)
    rows = [{name: read_json(layout.report(g, name)) for name in ("selfplay", "train", "gate", "eval")}
            for g in gens]
    by_gen = {g: r["eval"] for g, r in zip(gens, rows, strict=True)}
    for r in rows:
        r["eval"] = resolved_eval(r["eval"], by_gen, layout)
    return rows


#: what an evaluation spent: its own, never copied from the evaluation it points at
CLOCK_KEYS = ("wall_s", "stage_wall_s", "stage_cpu_s", "machine")


def resolved_eval(ev: dict, by_gen: dict[int, dict], layout: Layout) -> dict:
    """An ``eval.json`` as the report reads it: a generation whose gate kept an
    earlier best (``same_as``) shows that generation's results, with its own
    (near nothing) time."""
    origin = ev.get("same_as")
    if origin is None:
        return ev
    if origin not in by_gen or "same_as" in by_gen[origin]:
        raise FileNotFoundError(f"{layout.report(ev['generation'], 'eval')} points at generation {origin}'s "
                                "evaluation, which this run does not have: run "
                                f"`dvc repro evaluate@{origin}`")
    own = {k: ev[k] for k in CLOCK_KEYS if k in ev}
    return {**{k: v for k, v in by_gen[origin].items() if k not in CLOCK_KEYS}, **own,
            "generation": ev["generation"], "same_as": origin}


def player(name: str, simulations: int) -> str:
    """A model searched with another budget is another player."""
    return f"{name}@{simulations}"


def match_results(p: Params, rows: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """Every rated game: (evaluation games against the baselines and the
    previous best, gate games), each model named with its search budget."""
    evals, gates = [], []
    for r in rows:
        gate, ev = r["gate"], r["eval"]
        gs, es = gate.get("simulations", p.gate.simulations), ev.get("simulations", p.evaluate.simulations)
        gates.append((player(gate["candidate"], gs), player(gate["opponent"], gs),
                      gate["wins"], gate["draws"], gate["losses"]))
        if "same_as" in ev:
            continue  # the kept model's games, already counted at its own generation
        for key, v in ev.items():
            if isinstance(v, dict) and "opponent" in v:
                # the previous best is a model searched as this one: the same player as its own evaluation
                them = player(v["opponent"], es) if key == "vs_previous" else v["opponent"]
                evals.append((player(ev["model"], es), them, v["wins"], v["draws"], v["losses"]))
    return evals, gates


def anchor_of(p: Params, evals: list[tuple]) -> str:
    """The baseline the games inform best, rollout UCT or (Go) GnuGo: the
    one whose results are the furthest from all wins or all losses (pooled
    over the generations), so its distance to the models is measured, not
    bounded. Ties go to rollout UCT, then to the order the baselines played
    in. Connect Four's UCT-1000 is such a baseline; on Go the models beat
    20-playout UCT every game after one generation while GnuGo keeps winning
    some, so GnuGo anchors there. Random play, which every trained model
    beats every game, says almost nothing."""
    uct = f"uct{p.evaluate.uct_playouts}"
    totals: dict[str, list[float]] = {}
    for _, b, w, d, lost in evals:
        if b != uct and not b.startswith("gnugo"):
            continue  # random play, and the perfect player a trained model only draws against
        t = totals.setdefault(b, [0.0, 0.0])
        t[0] += w + d / 2
        t[1] += w + d + lost
    if not totals:
        return "random"

    def informed(name: str) -> tuple[float, bool]:
        points, games = totals[name]
        share = points / games if games else 1.0
        return min(share, 1 - share), name == uct

    best = max(totals, key=informed)  # max keeps the first of equals: the order played
    return best if informed(best)[0] > 0 else (uct if uct in totals else "random")


def training_clock(rows: list[dict]) -> list[tuple[float, float]]:
    """Per generation: cumulative minutes of wall-clock and of CPU time spent
    in self-play, training and gating up to and including it (each stage from
    its process's start to its report)."""
    out, wall, cpu = [], 0.0, 0.0
    for r in rows:
        for stage in TRAINING_STAGES:
            wall += r[stage].get("stage_wall_s", r[stage].get("wall_s", 0.0))
            cpu += r[stage].get("stage_cpu_s", 0.0)
        out.append((round(wall / 60, 2), round(cpu / 60, 2)))
    return out


#: the run's stages in the order a generation runs them, and their names in the report's line
SPLIT_STAGES = {"selfplay": "self-play", "train": "training", "gate": "gate", "eval": "evaluation"}


def time_split(rows: list[dict], test: dict | None = None) -> dict[str, float]:
    """Seconds of wall-clock each kind of stage took over the run (each stage
    from its process's start to its report; DVC between stages not counted),
    and the champion's held-out test. A stage that did not record its process
    time (an evaluation from before it did) is left out, not guessed."""
    split: dict[str, float] = {}
    for stage in SPLIT_STAGES:
        walls = [r[stage].get("stage_wall_s") for r in rows]
        if all(w is not None for w in walls):
            split[stage] = round(sum(walls), 1)
    if test and "wall_s" in test:
        split["test"] = test["wall_s"]
    return split


def split_line(split: dict[str, float]) -> str:
    total = sum(split.values())
    names = {**SPLIT_STAGES, "test": "the champion's test"}
    parts = [f"{names[k]} {v:.0f} s ({v / total:.0%})" for k, v in split.items()] if total else []
    return (f"time by stage: {', '.join(parts)}; {total / 60:.1f} min in all, DVC between stages not counted"
            if parts else "time by stage: not recorded")


def table(p: Params, rows: list[dict], elo: EloFit, gate_elo: EloFit) -> list[dict]:
    out, previous = [], None
    for r, (minutes, cpu_minutes) in zip(rows, training_clock(rows), strict=True):
        ev, gate, train, sp = r["eval"], r["gate"], r["train"], r["selfplay"]
        model = ev["model"]
        me = player(model, ev.get("simulations", p.evaluate.simulations))
        rating, se = elo.rating(me)
        row = {
            "generation": gate["generation"], "best": model,
            "training_minutes": minutes, "training_cpu_minutes": cpu_minutes,
            "elo": round(rating, 1), "elo_se": round(se, 1),
        }
        gain, gain_se = elo.difference(me, previous) if previous else (None, None)
        row["elo_gain"] = None if gain is None else round(gain, 1)
        row["elo_gain_se"] = None if gain_se is None else round(gain_se, 1)
        gate_me = player(model, gate.get("simulations", p.gate.simulations))
        if gate_me in gate_elo:
            g_rating, g_se = gate_elo.rating(gate_me)
            row["gate_elo"], row["gate_elo_se"] = round(g_rating, 1), round(g_se, 1)
        row.update({
            "gate_score": gate["score"], "gate_accepted": gate["accepted"],
            "vs_random": ev["vs_random"]["score"], "vs_uct": ev["vs_uct"]["score"],
            "vs_previous": ev["vs_previous"]["score"] if "vs_previous" in ev else None,
            "train_loss": train.get("train_loss"), "value_loss": train.get("train_value_loss"),
            "policy_loss": train.get("train_policy_loss"), "selfplay_length": sp["mean_length"],
        })
        if "vs_perfect" in ev:
            row["vs_perfect"] = ev["vs_perfect"]["score"]
        for key in gnugo_keys(ev):  # Go: GnuGo at each level of evaluate.gnugo_level
            row[key] = ev[key]["score"]
        if "solver" in ev:
            row["solver_error"] = ev["solver"]["search_error_rate"]
            row["policy_error"] = ev["solver"]["policy_error_rate"]
            for group, g in ev["solver"].get("groups", {}).items():
                if group != "all":
                    row[f"{group}_search_error"] = g["search_error_rate"]
                    row[f"{group}_policy_error"] = g["policy_error_rate"]
        out.append(row)
        previous = me
    return out


def gnugo_keys(ev: dict) -> list[str]:
    """The ``vs_gnugo<level>`` results of an ``eval.json``, in its order."""
    return [k for k in ev if k.startswith("vs_gnugo") and isinstance(ev[k], dict)]


def write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def reference_curve(p: Params) -> list[dict] | None:
    """The shipped default run's move errors per generation for this game
    (``models/reference/<game>.csv``), where this run measures them the same
    way (:data:`REFERENCE_MEASURE`): the curve a run is compared with to see
    whether it is normal. None where there is none or it would not compare."""
    path = REFERENCE_DIR / f"{p.game}.csv"
    e = p.evaluate
    if not path.is_file() or any(getattr(e, k) != v for k, v in REFERENCE_MEASURE.items()):
        return None
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]


def solver_summary(solver: dict) -> dict:
    """An ``eval.json``-style ``solver`` block as the report's metrics name it."""
    out = {"positions": solver["positions"], "simulations": solver.get("simulations"),
           "search_error": solver["search_error_rate"], "policy_error": solver["policy_error_rate"]}
    for key in ("policy_error_ci95", "search_error_ci95"):
        if key in solver:
            out[key] = solver[key]
    if len(solver.get("groups", {})) > 1:
        out["groups"] = {g: {"positions": v["positions"], "decisive": v.get("decisive"),
                             "policy_error": v["policy_error_rate"],
                             "policy_error_ci95": v.get("policy_error_ci95"),
                             "search_error": v["search_error_rate"],
                             "search_error_ci95": v.get("search_error_ci95")}
                         for g, v in solver["groups"].items()}
    return out


@dataclass(frozen=True)
class RunReport:
    """What :func:`report_step` wrote: ``metrics`` (``reports/metrics.json``),
    ``generations`` (the per-generation table, ``generations.csv``'s rows),
    ``reference`` (the shipped run's curve, or None), ``plots`` (the PNGs),
    ``card`` (the champion's metadata and the scalar metrics), ``final_eval``
    (the last generation's ``eval.json``), ``test`` (``reports/test.json``)
    and ``machine`` (the machine its last self-play ran on, in the line the
    stage said; None where the report does not record it)."""

    metrics: dict
    generations: list[dict]
    reference: list[dict] | None
    plots: list[Path]
    card: dict
    final_eval: dict
    test: dict
    machine: str | None = None


def report_step(p: Params, layout: Layout) -> RunReport:
    """The run's report from its generations' reports in ``layout``: Elo,
    the table, plots, the champion (a copy of the last generation's best) and
    its held-out test, and the metrics; every file written atomically."""
    game = p.make_game()
    rows = collect(p, layout)
    evals, gates = match_results(p, rows)
    anchor = anchor_of(p, evals)
    gen0 = player("gen0", rows[0]["gate"].get("simulations", p.gate.simulations))
    elo = fit_league(evals, anchor=anchor)
    gate_elo = fit_league(gates, anchor=gen0 if any(gen0 in r[:2] for r in gates) else gates[0][1])
    per_gen = table(p, rows, elo, gate_elo)
    last = per_gen[-1]
    final_eval = rows[-1]["eval"]
    metrics = {
        "game": game.name, "generations": len(per_gen), "champion": last["best"],
        "accepted": sum(r["gate_accepted"] for r in per_gen),
        "training_minutes": last["training_minutes"], "training_cpu_minutes": last["training_cpu_minutes"],
        "elo": last["elo"], "elo_se": last["elo_se"], "elo_anchor": anchor,
        "vs_random": last["vs_random"], "vs_uct": last["vs_uct"],
        "uct_playouts": p.evaluate.uct_playouts,
    }
    side = unbounded_side(evals, player(last["best"], final_eval.get("simulations", p.evaluate.simulations)),
                          anchor)
    if side:  # the champion's games leave its rating free that way: "elo" is the fit's prior
        metrics["elo_unbounded"] = side
    for key in ("gate_elo", "gate_elo_se", "vs_perfect", "solver_error", "policy_error"):
        if key in last:
            metrics[key] = last[key]
    for key in gnugo_keys(final_eval):  # the score, and GnuGo's own rating on the run's Elo scale
        name = final_eval[key]["opponent"]
        metrics[key] = last[key]
        if name in elo:
            metrics[f"{name}_elo"], metrics[f"{name}_elo_se"] = (round(x, 1) for x in elo.rating(name))
    if "solver" in final_eval:
        solver = final_eval["solver"]
        metrics["solver_positions"] = solver["positions"]
        metrics["solver_simulations"] = solver.get("simulations", p.evaluate.simulations)
        summary = solver_summary(solver)
        for key in ("policy_error_ci95", "search_error_ci95", "groups"):
            if key in summary:
                metrics[key] = summary[key]
    layout.plots.mkdir(parents=True, exist_ok=True)
    write_csv(layout.plots / "generations.csv", per_gen)
    reference = reference_curve(p)
    pngs = draw_plots(per_gen, game.name, anchor, layout.plots, reference)
    _, _, meta = load_model(layout.model(p.last_generation), game)
    atomic_write_bytes(layout.champion, layout.model(p.last_generation).read_bytes())
    test = test_step(p, layout, layout.champion)
    if "solver" in test:
        metrics["test"] = solver_summary(test["solver"])
    metrics["wall_s_by_stage"] = time_split(rows, test)
    write_json(layout.metrics, metrics)
    card = dict(meta, **{k: v for k, v in metrics.items() if isinstance(v, int | float | str)})
    where = rows[-1]["selfplay"].get("machine")
    machine = summary_line(where, p.runtime.precision) if isinstance(where, dict) else None
    return RunReport(metrics, per_gen, reference, pngs, card, final_eval, test, machine)


def champion_tags(report: RunReport) -> dict[str, str]:
    """What champions are compared by, as tags of the registered version: the
    champion and its minutes of training (wall and CPU), its error on the
    held-out test set overall and per group (``test.begin-hard.search_error``,
    ...), its Elo with the anchor and, on Go, its score against each GnuGo
    level (the yardstick there), and the machine line."""
    m = report.metrics
    tags = {k: m[k] for k in ("champion", "generations", "training_minutes", "training_cpu_minutes",
                              "elo", "elo_se", "elo_anchor")}
    if "elo_unbounded" in m:
        tags["elo_unbounded"] = m["elo_unbounded"]
    tags.update({k: m[k] for k in gnugo_keys(report.final_eval) if k in m})
    test = m.get("test", {})
    tags.update({f"test.{k}": test[k] for k in ("search_error", "policy_error", "positions", "simulations")
                 if k in test})
    for group, g in test.get("groups", {}).items():
        tags.update({f"test.{group}.{k}": g[k] for k in ("search_error", "policy_error")})
    if report.machine:
        tags["machine"] = report.machine
    return {k: str(round(v, 4) if isinstance(v, float) else v) for k, v in tags.items()}


def log_report(tr: Tracker, layout: Layout, report: RunReport) -> str:
    """The report into MLflow: every generation's run completed from its
    reports, the table's curves on the parent run (by generation and by
    seconds of training, the reference's beside them), the final metrics, the
    files, and the champion registered. Returns the registered version."""
    p = tr.params
    for g in sorted(p.generations):  # every generation run mirrors its outputs, cached stages included
        tr.complete_generation(g, layout)
    for r in report.generations:
        numbers = {k: v for k, v in r.items() if isinstance(v, int | float) and k != "generation"}
        tr.log_summary(numbers, step=r["generation"])
        # the same curves over seconds of training: the x-axis runs compare on
        tr.log_summary({f"by_training_s/{k}": v for k, v in numbers.items()
                        if k == "elo" or k.endswith("_error")}, step=round(60 * r["training_minutes"]))
    for r in report.reference or ():  # beside the run's own curves, to see whether the run is normal
        tr.log_summary({f"reference/{k}": r[k] for k in ("solver_error", "policy_error")},
                       step=int(r["generation"]))
        tr.log_summary({f"by_training_s/reference_{k}": r[k] for k in ("solver_error", "policy_error")},
                       step=round(60 * r["training_minutes"]))
    metrics = report.metrics
    tr.log_summary({f"final_{k}": v for k, v in metrics.items() if isinstance(v, int | float)})
    tr.log_summary({f"final_wall_s/{k}": v for k, v in metrics["wall_s_by_stage"].items()})
    if "test" in metrics:  # the held-out set: test/search_error, test/groups/begin-hard/policy_error, ...
        tr.log_summary({f"test/{k}": v for k, v in flatten(metrics["test"]).items()
                        if isinstance(v, int | float) and not isinstance(v, bool)})
    for path in [*report.plots, layout.plots / "generations.csv", layout.metrics, layout.test_report]:
        tr.log_artifact(path, "report")
    version = tr.register_champion(layout.champion, report.card, champion_tags(report))
    tr.finish()
    return version


def elo_text(elo: float, se: float, anchor: str, unbounded: str | None = None,
             anchor_score: float | None = None) -> str:
    """The champion's Elo as the report says it: with its 95% interval, or,
    where its games do not bound it (``unbounded``: ``"above"`` or
    ``"below"``, from :func:`~zeroloop.engine.rating.unbounded_side`), as
    what it is, the fit's number then coming from its prior (Elo needs an
    anchor the games can inform). A champion that won every game against the
    anchor is still bounded when it took fewer than all the points from the
    previous best, and that one is bounded in turn."""
    fit = f"{elo:.0f} ± {1.96 * se:.0f}"
    if unbounded:
        against = f"{anchor_score:.0%} against {anchor}, the anchor; " if anchor_score is not None else ""
        return f"Elo {unbounded} what its games measure ({against}the fit's {fit} is its prior's)"
    return f"Elo {fit} ({anchor} = 0)"


def report_lines(p: Params, layout: Layout, report: RunReport, version: str | None) -> list[str]:
    """The report in a few lines for the terminal: the champion's strength and
    registration, GnuGo's levels, the move errors, the held-out test per group
    and where the time went."""
    metrics, last, final_eval = report.metrics, report.generations[-1], report.final_eval
    anchor = metrics["elo_anchor"]
    reg = f"; registered as {p.registered_model_name()} v{version} @champion" if version else ""
    scores = {f"uct{p.evaluate.uct_playouts}": last["vs_uct"],
              **{final_eval[k]["opponent"]: last[k] for k in gnugo_keys(final_eval)}}
    elo = elo_text(last["elo"], last["elo_se"], anchor, metrics.get("elo_unbounded"), scores.get(anchor))
    lines = [f"champion {metrics['champion']} after {len(report.generations)} generations "
             f"({last['training_minutes']:.0f} min of training): {elo}, vs random {last['vs_random']:.0%}, "
             f"vs uct{p.evaluate.uct_playouts} {last['vs_uct']:.0%}{reg}"]
    for key in gnugo_keys(final_eval):
        name = final_eval[key]["opponent"]
        rated = (" (the Elo anchor)" if name == anchor else
                 f", GnuGo's Elo {metrics[name + '_elo']:.0f} ± {1.96 * metrics[name + '_elo_se']:.0f}"
                 if name + "_elo" in metrics else "")
        lines.append(f"vs GnuGo level {name.removeprefix('gnugo')} {last[key]:.0%}{rated}")
    if "solver_error" in last:
        lines.append(f"move error with {metrics['solver_simulations']} simulations "
                     f"{last['solver_error']:.1%}, raw policy {last['policy_error']:.1%} "
                     f"({metrics['solver_positions']} validation positions)")
    if "test" in metrics:
        t = metrics["test"]
        lines.append(f"held-out test set: move error with {t['simulations']} simulations "
                     f"{t['search_error']:.1%}, raw policy {t['policy_error']:.1%} "
                     f"({t['positions']} positions, {layout.test_report})")
        for group, g in t.get("groups", {}).items():
            lines.append(f"  {group:14s} search {g['search_error']:6.1%}  raw policy "
                         f"{g['policy_error']:6.1%}  ({g['positions']} positions)")
    else:
        lines.append(report.test.get("note", "no held-out test positions"))
    lines.append(split_line(metrics["wall_s_by_stage"]))
    return lines
