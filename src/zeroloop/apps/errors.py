"""``zeroloop errors``: the move error of model files against perfect play on
the pipeline's position sets, as the evaluate and report stages measure it.

The validation set (``data/positions.json``) is the one every generation is
measured on and ablations choose on; the held-out test set
(``data/test_positions.json``) is the one a run reports. Measuring an older
champion, another run's model or the shipped one on the same sets makes them
comparable with the report's figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SETS = {"validation": "positions", "test": "test_positions"}


def evaluate_params(params_file: str, sims: int | None):
    """The params of ``params_file``, with ``evaluate.simulations`` set to
    ``--sims`` where given: how the commands that search as the evaluate
    stage does read them."""
    from zeroloop.pipeline.params import load_params

    p = load_params(params_file)
    if sims is None:
        return p
    if sims < 1:
        raise ValueError(f"--sims {sims}: must be >= 1")
    return p.model_copy(update={"evaluate": p.evaluate.model_copy(update={"simulations": sims})})


def measure(models: list[str], which: str, params_file: str, root: str, sims: int | None,
            as_json: bool, pairs: bool = False) -> int:
    """Measure ``models`` on the sets ``which`` names and print each one's
    errors; then the paired comparisons: each model after the first against
    the first, or, with ``pairs``, the models as baseline/arm pairs (A1 B1
    A2 B2 ..., one pair a seed as an ablation runs them), each arm against
    its own baseline, and all pairs pooled into one comparison."""
    from zeroloop.apps.play import PlayError, resolve_model
    from zeroloop.engine.positions import PositionSet, move_mistakes
    from zeroloop.pipeline.data.layout import Layout
    from zeroloop.pipeline.data.storage import read_json
    from zeroloop.pipeline.evaluation import policy_and_search_moves, solver_errors
    from zeroloop.pipeline.matches import PinnedModels

    if pairs and (len(models) < 2 or len(models) % 2):
        raise ValueError(f"--pairs takes baseline/arm pairs (A1 B1 A2 B2 ...): got {len(models)} "
                         f"model{'s' * (len(models) != 1)}")
    p = evaluate_params(params_file, sims)
    game = p.make_game()
    layout = Layout(Path(root))
    from zeroloop.engine.nn import resolve_device
    from zeroloop.engine.nn.inference import precision_name

    precision = precision_name(p.runtime.precision, resolve_device(p.runtime.device))
    sets = ["validation", "test"] if which == "both" else [which]
    loaded = {}
    for name in sets:
        path = getattr(layout, SETS[name])
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no {name} positions yet; `dvc repro {SETS[name]}` makes them")
        data = read_json(path)
        ps = PositionSet.from_json(data)
        if ps.game != game.name:
            raise ValueError(f"{path} holds {ps.game} positions, but {params_file} is for {game.name}")
        if not ps.moves:
            raise ValueError(f"{path}: no positions ({data.get('note', 'an empty set')})")
        loaded[name] = ps
    files = []
    for m in models:
        try:
            info = resolve_model(game, m, root)
        except PlayError as exc:
            raise ValueError(str(exc)) from None
        if info.path is None:
            raise ValueError(f"{m}: an untrained network has no file to measure")
        files.append((m, info.path))
    mistakes: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}
    with PinnedModels() as pins:  # each file read once: one network on every set, even if replaced meanwhile
        pinned = [pins.local(path) for _, path in files]
        for i, (m, path) in enumerate(files):
            for name, ps in loaded.items():
                moves = policy_and_search_moves(p, pinned[i], ps.states(game))
                mistakes[i, name] = (move_mistakes(ps, moves[0]), move_mistakes(ps, moves[1]))
                _print_errors(m, path, name, solver_errors(p, pinned[i], ps, moves), precision, as_json)
    compared = ([(i, i + 1) for i in range(0, len(files), 2)] if pairs
                else [(0, i) for i in range(1, len(files))])
    for name, ps in loaded.items():
        groups = np.asarray(ps.groups)
        for i, j in compared:
            _compare(files[i][0], files[j][0], name, groups, ps.group_names(), mistakes[i, name],
                     mistakes[j, name], as_json)
        if pairs and len(compared) > 1:
            _compare([files[i][0] for i, _ in compared], [files[j][0] for _, j in compared], name,
                     np.tile(groups, len(compared)), ps.group_names(),
                     _pooled([mistakes[i, name] for i, _ in compared]),
                     _pooled([mistakes[j, name] for _, j in compared]), as_json)
    return 0


def _pooled(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Several models' (raw, search) mistakes on one set, end to end: one row
    of every position once per model, in the order given."""
    return np.concatenate([raw for raw, _ in parts]), np.concatenate([search for _, search in parts])


def _print_errors(m: str, path: str, name: str, out: dict, precision: str, as_json: bool) -> None:
    """One model's errors on one set (``m`` as the user named it, ``path`` its file)."""
    if as_json:
        print(json.dumps({"model": m, "path": path, "set": name, **out}), flush=True)
        return
    print(f"{m} ({path}) on the {name} set: {out['positions']} positions, search at "
          f"{out['simulations']} simulations, network {precision}")
    print(_line("overall", out["search_error_rate"], out["search_error_ci95"],
                out["policy_error_rate"], out["policy_error_ci95"], out["positions"]))
    for g, v in out["groups"].items() if len(out["groups"]) > 1 else ():
        print(_line(g, v["search_error_rate"], v["search_error_ci95"], v["policy_error_rate"],
                    v["policy_error_ci95"], v["positions"]))
    sys.stdout.flush()


def _compare(first: str | list[str], second: str | list[str], which: str, groups: np.ndarray,
             names: list[str], a: tuple, b: tuple, as_json: bool) -> None:
    """Print ``second`` against ``first`` position by position (paired) on one
    set, overall and per group (``groups``: each position's, ``names``: in
    order). Lists of names: pairs pooled, ``a`` and ``b`` their rows end to end."""
    from zeroloop.engine.positions import paired_errors

    rows = [("overall", np.ones(len(groups), bool))]
    if len(names) > 1:
        rows += [(g, groups == g) for g in names]
    out = {g: {"search": paired_errors(a[1][sel], b[1][sel]),
               "raw_policy": paired_errors(a[0][sel], b[0][sel])} for g, sel in rows}
    pooled = isinstance(first, list)
    if as_json:
        extra = {"pairs": len(first)} if pooled else {}
        print(json.dumps({"paired": {"first": first, "second": second, "set": which, **extra, **out}}),
              flush=True)
        return
    if pooled:
        print(f"{', '.join(second)} against {', '.join(first)}, {len(first)} pairs pooled on the {which} "
              f"set ({len(groups)} positions, the set's once a pair; difference in points, the arms minus "
              "their baselines; errs: positions only one side got wrong; McNemar p):")
    else:
        print(f"{second} against {first}, paired on the {which} set (difference in points, second minus "
              f"first; errs: positions only one of them got wrong; McNemar p):")
    for g, v in out.items():
        print(f"  {g:14s} search {_pair(v['search'])}   raw policy {_pair(v['raw_policy'])}")
    sys.stdout.flush()


def _pair(v: dict) -> str:
    lo, hi = v["difference_ci95"]
    return (f"{100 * v['difference']:+5.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"errs {v['only_first']:>3d}/{v['only_second']:<3d} p {v['mcnemar_p']:.3f}")


def _line(label: str, search: float, s_ci: list[float], raw: float, r_ci: list[float], n: int) -> str:
    return (f"  {label:14s} search {100 * search:5.1f}% [{100 * s_ci[0]:.1f}, {100 * s_ci[1]:.1f}]   "
            f"raw policy {100 * raw:5.1f}% [{100 * r_ci[0]:.1f}, {100 * r_ci[1]:.1f}]   ({n} positions)")
