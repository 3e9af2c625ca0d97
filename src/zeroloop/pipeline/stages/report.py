"""report: the run's summary over all generations - Elo ratings, metrics,
plots, the champion model - and its registration in MLflow."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from zeroloop.engine.rating import fit_elo
from zeroloop.pipeline.params import Params
from zeroloop.pipeline.stages.common import LAYOUT, say
from zeroloop.pipeline.storage import atomic_write_bytes, load_model, read_json, write_json
from zeroloop.pipeline.tracking import Tracker

PLOTS = LAYOUT.plots
METRICS = LAYOUT.metrics
CHAMPION = LAYOUT.champion
ANCHOR = "random"


def collect(p: Params) -> list[dict]:
    rows = []
    for g in sorted(p.generations):
        rows.append({name: read_json(LAYOUT.report(g, name))
                     for name in ("selfplay", "train", "gate", "eval")})
    return rows


def match_results(rows: list[dict]) -> list[tuple[str, str, float, float, float]]:
    """Every game played between rated players: gates and evaluations."""
    out = []
    for r in rows:
        gate = r["gate"]
        out.append((gate["candidate"], gate["opponent"], gate["wins"], gate["draws"], gate["losses"]))
        for v in r["eval"].values():
            if isinstance(v, dict) and "opponent" in v:
                out.append((r["eval"]["model"], v["opponent"], v["wins"], v["draws"], v["losses"]))
    return out


def table(rows: list[dict], elo: dict[str, tuple[float, float]]) -> list[dict]:
    out = []
    for r in rows:
        ev, gate, train, sp = r["eval"], r["gate"], r["train"], r["selfplay"]
        model = ev["model"]
        row = {
            "generation": gate["generation"], "best": model,
            "elo": round(elo[model][0], 1), "elo_se": round(elo[model][1], 1),
            "gate_score": gate["score"], "gate_accepted": gate["accepted"],
            "vs_random": ev["vs_random"]["score"], "vs_uct": ev["vs_uct"]["score"],
            "train_loss": train.get("train_loss"), "value_loss": train.get("train_value_loss"),
            "policy_loss": train.get("train_policy_loss"), "selfplay_length": sp["mean_length"],
        }
        if "vs_perfect" in ev:
            row["vs_perfect"] = ev["vs_perfect"]["score"]
        if "solver" in ev:
            row["solver_error"] = ev["solver"]["search_error_rate"]
            row["policy_error"] = ev["solver"]["policy_error_rate"]
        out.append(row)
    return out


def write_csv(path: Path, rows: list[dict]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    atomic_write_bytes(path, buf.getvalue().encode())


def draw_plots(rows: list[dict], game: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gens = [r["generation"] for r in rows]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(gens, [r["elo"] for r in rows], yerr=[1.96 * r["elo_se"] for r in rows], marker="o",
                capsize=3)
    ax.set(xlabel="generation", ylabel="Elo (random = 0), 95% interval",
           title=f"{game}: strength of the best model")
    ax.grid(alpha=0.3)
    paths.append(PLOTS / "elo.png")
    _save(fig, paths[-1])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in (("vs_random", "vs random"), ("vs_uct", "vs rollout UCT"), ("vs_perfect", "vs perfect"),
                       ("gate_score", "gate: candidate vs best")):
        if key in rows[0]:
            ax.plot(gens, [r[key] for r in rows], marker="o", label=label)
    if "solver_error" in rows[0]:
        ax.plot(gens, [r["solver_error"] for r in rows], marker="s", ls="--", label="solver error rate")
    ax.axhline(0.55, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="generation", ylabel="score (wins + draws/2)", ylim=(-0.02, 1.02), title=f"{game}: results")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(PLOTS / "scores.png")
    _save(fig, paths[-1])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in ("train_loss", "value_loss", "policy_loss"):
        ax.plot(gens, [r[key] for r in rows], marker="o", label=key.replace("_", " "))
    ax.set(xlabel="generation", ylabel="last-epoch mean", title=f"{game}: training loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(PLOTS / "losses.png")
    _save(fig, paths[-1])
    return paths


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def run(p: Params) -> None:
    game = p.make_game()
    rows = collect(p)
    elo = fit_elo(match_results(rows), anchor=ANCHOR)
    per_gen = table(rows, elo)
    last = per_gen[-1]
    final_eval = rows[-1]["eval"]
    metrics = {
        "game": game.name, "generations": len(per_gen), "champion": last["best"],
        "accepted": sum(r["gate_accepted"] for r in per_gen),
        "elo": last["elo"], "elo_se": last["elo_se"],
        "vs_random": last["vs_random"], "vs_uct": last["vs_uct"],
        "uct_playouts": p.evaluate.uct_playouts,
    }
    for key in ("vs_perfect", "solver_error", "policy_error"):
        if key in last:
            metrics[key] = last[key]
    if "solver" in final_eval:
        metrics["solver_positions"] = final_eval["solver"]["positions"]
    PLOTS.mkdir(parents=True, exist_ok=True)
    write_csv(PLOTS / "generations.csv", per_gen)
    pngs = draw_plots(per_gen, game.name)
    write_json(METRICS, metrics)
    _, _, meta = load_model(LAYOUT.model(p.last_generation), game)
    atomic_write_bytes(CHAMPION, LAYOUT.model(p.last_generation).read_bytes())
    with Tracker.open(p) as tr:
        for g in sorted(p.generations):  # every generation run mirrors its outputs, cached stages included
            tr.complete_generation(g, LAYOUT)
        for r in per_gen:
            tr.log_summary({k: v for k, v in r.items() if isinstance(v, int | float) and k != "generation"},
                           step=r["generation"])
        tr.log_summary({f"final_{k}": v for k, v in metrics.items() if isinstance(v, int | float)})
        for path in [*pngs, PLOTS / "generations.csv", METRICS]:
            tr.log_artifact(path, "report")
        version = tr.register_champion(CHAMPION, dict(meta, **metrics))
        tr.finish()
    reg = f"; registered as {p.registered_model_name()} v{version} @champion" if version else ""
    say("report", f"champion {metrics['champion']} after {len(per_gen)} generations: Elo {last['elo']:.0f} "
                  f"± {1.96 * last['elo_se']:.0f}, vs random {last['vs_random']:.0%}, "
                  f"vs uct{p.evaluate.uct_playouts} {last['vs_uct']:.0%}{reg}")
