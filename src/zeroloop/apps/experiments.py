"""``zeroloop experiments``: the DVC experiments of a project side by side.

An ablation changes one thing against a baseline and is run as a DVC
experiment (``dvc exp run -n NAME -S key=value``). This reads every experiment
of the current commit (and the baseline: the commit's or the workspace's own
results), its params and its ``reports/metrics.json``, through DVC's API, and
prints one row per run: what it changed against the baseline, the minutes of
training, the Elo against the rollout-UCT anchor, and the move error against
perfect play, overall with its 95% interval and per Pons group, of the search
and of the raw policy. Markdown, ready for docs/strength.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zeroloop.pipeline.tracking.runs import flatten

METRICS = "reports/metrics.json"


@dataclass
class Run:
    name: str
    rev: str
    params: dict[str, Any]
    metrics: dict[str, Any]


def check_repository(repo: str | Path = ".") -> None:
    """DVC experiments live in a git repository with a commit and a DVC
    project: ValueError saying which is missing, naming the folder."""
    import subprocess

    where = Path(repo).resolve()
    if not where.is_dir():
        raise ValueError(f"{where}: no such folder")

    def git(*args: str) -> bool:
        try:
            return subprocess.run(["git", *args], cwd=where, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    if not git("rev-parse", "--git-dir"):
        raise ValueError(f"{where} is not in a git repository: DVC experiments need a git repository with "
                         "DVC in it (run this in a clone of your zeroloop project)")
    if not git("rev-parse", "--verify", "-q", "HEAD"):
        raise ValueError(f"{where}: the git repository has no commit yet; DVC experiments start from a "
                         "commit (git add -A && git commit)")
    if not any((d / ".dvc").is_dir() for d in (where, *where.parents)):
        raise ValueError(f"{where} is not in a DVC project (no .dvc/ folder here or above): `dvc init`, "
                         "then run the pipeline")


def collect(repo: str | Path = ".") -> list[Run]:
    """The baseline first, then each experiment of the current commit that has
    results. A workspace that has not run itself still comes first, with its
    params and no metrics: what the experiments changed is read against it."""
    import dvc.api

    check_repository(repo)
    runs = []
    workspace_params = None
    for row in dvc.api.exp_show(repo=str(repo)):
        rev = row.get("rev")
        name = row.get("Experiment") or ("workspace" if rev == "workspace" else rev)
        ref = row.get("Experiment") or rev
        at = None if rev == "workspace" else ref
        try:
            params = dvc.api.params_show(repo=str(repo), rev=at)
        except Exception:  # noqa: BLE001 - a failed or queued experiment has nothing to show
            continue
        try:  # the file as written (DVC's metrics view drops the intervals, which are lists)
            metrics = json.loads(dvc.api.read(METRICS, repo=str(repo), rev=at))
        except Exception:  # noqa: BLE001 - not run (yet), or failed: no results
            metrics = None
        if metrics:
            runs.append(Run(str(name), str(rev), flatten(params), metrics))
        elif rev == "workspace":
            workspace_params = flatten(params)
    if workspace_params is not None:  # the baseline's params even where it has not run itself
        runs.insert(0, Run("workspace", "workspace", workspace_params, {}))
    return runs


def changes(run: Run, baseline: Run) -> str:
    """The params the run sets differently from the baseline, ``key=value`` each."""
    diff = [f"{k}={v}" for k, v in sorted(run.params.items())
            if baseline.params.get(k) != v and not k.startswith(("generations", "runtime", "mlflow", "tune"))]
    return ", ".join(diff) or "(baseline)"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _with_ci(value: float | None, ci: list[float] | None) -> str:
    return _pct(value) + (f" [{_pct(ci[0])}, {_pct(ci[1])}]" if ci else "")


def table(runs: list[Run], baseline: Run | None = None, groups_from: str = "validation") -> str:
    """A markdown table of ``runs`` against ``baseline`` (default: the first
    run): the validation set's errors, the held-out test set's (runs whose
    report has one), and per group those of ``groups_from`` (``validation``
    or ``test``)."""
    base = baseline or (runs[0] if runs else None)
    runs = [r for r in runs if r.metrics]  # a workspace that has not run gives its params only
    if not runs:
        return "no experiment with reports/metrics.json"
    per_group = (lambda m: m.get("test", {}).get("groups", {})) if groups_from == "test" else \
        (lambda m: m.get("groups", {}))
    groups = list(per_group(base.metrics)) or next((list(per_group(r.metrics)) for r in runs
                                                     if per_group(r.metrics)), [])
    has_test = any("test" in r.metrics for r in runs)
    head = ["run", "changes", "training min", "training CPU min", "Elo (UCT = 0)", "search error % [95%]",
            "raw policy error % [95%]"]
    if has_test:
        head += ["test search % [95%]", "test raw % [95%]"]
    head += [f"{'test ' if groups_from == 'test' else ''}{g} search / raw" for g in groups]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        m = r.metrics
        cells = [r.name, changes(r, base), f"{m.get('training_minutes', float('nan')):.1f}",
                 f"{m.get('training_cpu_minutes', float('nan')):.1f}",
                 f"{m.get('elo', float('nan')):.0f} ± {1.96 * m.get('elo_se', float('nan')):.0f}",
                 _with_ci(m.get("solver_error"), m.get("search_error_ci95")),
                 _with_ci(m.get("policy_error"), m.get("policy_error_ci95"))]
        if has_test:
            t = m.get("test", {})
            cells += [_with_ci(t.get("search_error"), t.get("search_error_ci95")),
                      _with_ci(t.get("policy_error"), t.get("policy_error_ci95"))]
        for g in groups:
            v = per_group(m).get(g, {})
            cells.append(f"{_pct(v.get('search_error'))} / {_pct(v.get('policy_error'))}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
