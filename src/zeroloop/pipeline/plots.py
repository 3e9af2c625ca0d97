"""The report's plots, from its per-generation table (``generations.csv``'s
rows): strength over minutes of training, move errors against perfect play,
match scores and training losses, each a PNG written atomically."""

from __future__ import annotations

import io
from pathlib import Path

from zeroloop.pipeline.data.storage import atomic_write_bytes

#: the legend of the shipped default run's curve (:func:`zeroloop.pipeline.report.reference_curve`)
REFERENCE_LABEL = "default run (reference; Zen 3, AVX2, 2 cores, int8)"


def draw_plots(rows: list[dict], game: str, anchor: str, where: Path, reference: list[dict] | None = None
               ) -> list[Path]:
    """``elo.png``, ``errors.png``, ``scores.png`` and ``losses.png`` in
    ``where``, from the report's rows (one per generation); ``anchor`` is the
    player at Elo 0. Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gens = [r["generation"] for r in rows]
    minutes = [r["training_minutes"] for r in rows]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(minutes, [r["elo"] for r in rows], yerr=[1.96 * r["elo_se"] for r in rows], marker="o",
                capsize=3)
    for x, y, g in zip(minutes, [r["elo"] for r in rows], gens, strict=True):
        ax.annotate(str(g), (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set(xlabel="minutes of training (self-play + training + gate, wall-clock)",
           ylabel=f"Elo ({anchor} = 0), 95% interval", title=f"{game}: strength of the best model")
    ax.grid(alpha=0.3)
    paths.append(where / "elo.png")
    _save(fig, paths[-1])
    paths.append(error_plot(rows, game, minutes, where / "errors.png", reference))
    fig, ax = plt.subplots(figsize=(6, 4))
    gnugo = [(k, f"vs GnuGo level {k.removeprefix('vs_gnugo')}") for k in rows[0] if k.startswith("vs_gnugo")]
    for key, label in (("vs_random", "vs random"), ("vs_uct", "vs rollout UCT"), ("vs_perfect", "vs perfect"),
                       *gnugo, ("vs_previous", "vs the previous best"),
                       ("gate_score", "gate: candidate vs best")):
        points = [(g, r[key]) for g, r in zip(gens, rows, strict=True) if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
    if "solver_error" in rows[0]:
        ax.plot(gens, [r["solver_error"] for r in rows], marker="s", ls="--", label="solver error rate")
    ax.axhline(0.55, color="grey", lw=0.8, ls=":")
    ax.set(xlabel="generation", ylabel="score (wins + draws/2)", ylim=(-0.02, 1.02), title=f"{game}: results")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(where / "scores.png")
    _save(fig, paths[-1])
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in ("train_loss", "value_loss", "policy_loss"):
        ax.plot(gens, [r[key] for r in rows], marker="o", label=key.replace("_", " "))
    ax.set(xlabel="generation", ylabel="last-epoch mean", title=f"{game}: training loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    paths.append(where / "losses.png")
    _save(fig, paths[-1])
    return paths


def error_plot(rows: list[dict], game: str, minutes: list[float], path: Path,
               reference: list[dict] | None = None) -> Path:
    """Move error against perfect play over minutes of training: the raw
    policy and the search, per group and overall, and the shipped default
    run's overall curve where there is one; a note where the run measured
    none. Written to ``path``."""
    import matplotlib.pyplot as plt

    if "solver_error" not in rows[0]:
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.text(0.5, 0.5, f"{game}: no solver-labelled positions (evaluate.positions_per_group = 0,\n"
                          "or no perfect player for this game here)", ha="center", va="center")
        ax.axis("off")
        _save(fig, path)
        return path
    groups = [k.removesuffix("_search_error") for k in rows[0] if k.endswith("_search_error")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, kind, title in ((axes[0], "policy", "raw policy (no search)"), (axes[1], "search", "search")):
        for group in groups:
            ax.plot(minutes, [r[f"{group}_{kind}_error"] for r in rows], marker=".", lw=1, label=group)
        overall = "policy_error" if kind == "policy" else "solver_error"
        ax.plot(minutes, [r[overall] for r in rows], marker="o", lw=2.5, color="black", label="overall")
        if reference:
            ax.plot([r["training_minutes"] for r in reference], [r[overall] for r in reference], marker="o",
                    lw=1.5, ls="--", color="grey", label=REFERENCE_LABEL)
        ax.set(xlabel="minutes of training (wall-clock)", title=f"{game}: {title}")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of positions with a losing-result move")
    axes[1].legend(fontsize=8)
    _save(fig, path)
    return path


def _save(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
