"""The ceiling of self-play on this CPU: what a simulation costs, part by part,
with a network that costs nothing and with each net asked for, in one run.

Each net of ``--nets`` plays the pipeline's self-play (its search and move
schedule at their defaults, ``--in-flight`` games in flight, every network
call exactly ``--eval-batch`` positions behind the position cache, the games'
records written as shards) in one process with one torch thread, as a worker
runs it, for a budget of ``--seconds`` or ``--positions``. One
:class:`~zeroloop.engine.timing.PartTimer` is handed to the self-play loop, the
search and the evaluators, so the split is measured in the real code path, not
a copy of it: encoding, cache, batching, network, tree, rules, move choice,
records (:data:`~zeroloop.engine.timing.PARTS` says what each holds), and
"other", the wall time no part was charged.

``const`` is :class:`~zeroloop.engine.nn.ConstantEvaluator`: uniform priors
and value 0 after encoding the batch, through the same cache and batching, so
its simulations/s is the loop's own ceiling and its table the overhead any net
adds its own cost to. It plays other games than a trained net (uniform priors,
other lengths and cache hits): compare per simulation, not per game.

Printed: the machine line; per net simulations/s (wall), positions/s (moves
played per CPU-second), network rows, cache hits; a table of microseconds per
simulation and share of each part per net; the network's share; the coarse
split the pipeline logs (:class:`~zeroloop.engine.search.SearchStats`) as a
cross-check; each net's simulations/s as a ratio to the first; and the first
net played again with an evaluator given no timer (the same seeds and rounds;
the search keeps its own): whether the games were the same, and what the
evaluator's laps cost.

    python benchmarks/selfplay_ceiling.py [--nets const,5x64] [--game connect4] [--sims 64]
        [--games 256] [--in-flight 128] [--eval-batch 32] [--cache 100000]
        [--seconds 30 | --positions N] [--precision auto|fp32|bf16|int8] [--shard-games 100]

A net spec is one of :data:`SPEC_HELP`; :func:`inner_evaluator` is the one
place a new kind of net plugs in.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# ---------------------------------------------------------------------------------------------
# Net kinds: THE ONE PLACE A NEW KIND PLUGS IN.
#
# A spec string of --nets names a net; inner_evaluator() builds the evaluator that self-play's
# FixedBatchEvaluator (the cache and the fixed batches) wraps, charging ``timer`` its encoding and
# network parts as NetworkEvaluator does. To add a kind (net.kind: mlp, a small resnet, ...), add a
# branch that recognises its spec, builds the net and returns NetworkEvaluator(game, net, "cpu",
# precision=precision, timer=timer) with a label, and say its spec in SPEC_HELP. Nothing else in
# this script knows the kinds.
# ---------------------------------------------------------------------------------------------
SPEC_HELP = ("const (the network that costs nothing), [KIND:]AxB (an untrained net of a net.kind, seeded, "
             "as benchmarks/net_sizes.py writes it: 5x64 a ResNet, gpool:3x32, mlp:3x512), or a model "
             "file (PATH.pt, any kind load_model reads); any of them with @states: the search keeps one "
             "State per node (every game's path but Connect Four's rows)")


class StatesOnly:
    """``inner`` answering states only (no ``game``, no ``evaluate_planes``):
    the search keeps one State per node and the cache is the dictionary, as
    for every game without rows (Connect Four's path before issue 51's rows)."""

    pads = True

    def __init__(self, inner) -> None:
        self.inner = inner

    def __call__(self, states, *, pad_to: int = 0):
        return self.inner(states, pad_to=pad_to)


def inner_evaluator(spec: str, game, *, precision: str, seed: int, timer=None) -> tuple[str, object]:
    """``(label, evaluator)`` for the net ``spec`` names (:data:`SPEC_HELP`);
    ``ValueError`` for a spec no kind recognises or a net that cannot be built."""
    import torch

    from zeroloop.engine.nn import ConstantEvaluator, NetConfig, NetworkEvaluator, PolicyValueNet

    if spec.endswith("@states"):
        label, ev = inner_evaluator(spec.removesuffix("@states"), game, precision=precision, seed=seed,
                                    timer=timer)
        return f"{label} states", StatesOnly(ev)
    if spec == "const":
        return "const", ConstantEvaluator(game, timer=timer)
    try:
        if re.fullmatch(r"((resnet|gpool|mlp):)?\d+x\d+", spec):
            from net_sizes import parse_nets  # this folder's script: one way to write a net

            torch.manual_seed(seed)
            net = PolicyValueNet.for_game(game, NetConfig(**parse_nets(spec)[0]))
            ev = NetworkEvaluator(game, net, "cpu", precision=precision, timer=timer)
            return f"{spec} {ev.precision}", ev
        if spec.endswith(".pt"):
            from zeroloop.pipeline.data.storage import load_model

            if not Path(spec).is_file():
                raise ValueError("no such model file")
            net, _, _ = load_model(spec, game)
            ev = NetworkEvaluator(game, net, "cpu", precision=precision, timer=timer)
            return f"{Path(spec).stem} {ev.precision}", ev
    except ValueError as exc:  # a bad shape, a model for another game, a damaged file
        raise ValueError(f"--nets {spec!r}: {exc}") from None
    raise ValueError(f"--nets {spec!r}: expected {SPEC_HELP}")
# ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One net's self-play: totals over its rounds."""

    label: str
    wall: float = 0.0  # seconds inside play_selfplay_games
    cpu: float = 0.0  # process CPU seconds, the same stretches
    rounds: int = 0
    games: int = 0
    moves: int = 0
    asked: int = 0  # positions the search asked for
    hits: int = 0
    rows: int = 0  # network rows (padding included)
    stats: object = None  # SearchStats
    parts: dict[str, float] = field(default_factory=dict)
    actions: list[list[int]] = field(default_factory=list)


def play(game, inner, label: str, a, *, timer, rounds: int | None = None) -> Run:
    """Self-play rounds of ``a.games`` games (round ``r``'s game ``k`` seeded by
    ``(a.seed, r, k)``) until the budget (``a.seconds`` of self-play, or
    ``a.positions`` moves; at least one round), or exactly ``rounds`` rounds.
    Finished games go into shards of ``a.shard_games`` written as the pipeline
    writes them (a scratch directory), inside the timed stretch."""
    from zeroloop.engine.nn import FixedBatchEvaluator
    from zeroloop.engine.search import SearchConfig, SearchStats
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games, records_to_arrays
    from zeroloop.pipeline.data.storage import save_shard

    search, selfplay = SearchConfig(simulations=a.sims), SelfplayConfig(eval_batch=a.eval_batch)
    ev = FixedBatchEvaluator(inner, batch=a.eval_batch, cache=a.cache, timer=timer)
    run = Run(label, stats=SearchStats())
    pending, shards = [], [0]
    with tempfile.TemporaryDirectory(prefix="selfplay_ceiling.") as scratch:
        def write(i: int, record) -> None:  # as the pipeline's worker writes a shard when it is whole
            pending.append(record)
            if len(pending) == a.shard_games:
                path = Path(scratch) / f"shard_{shards[0]:05d}.zls"
                save_shard(path, records_to_arrays(game, pending), {"game": game.name, "index": shards[0]})
                shards[0] += 1
                pending.clear()

        while True:
            seeds = [np.random.SeedSequence([a.seed, run.rounds, k]) for k in range(a.games)]
            c0, t0 = time.process_time(), time.perf_counter()
            records = play_selfplay_games(game, ev, search, selfplay, seeds, in_flight=a.in_flight,
                                          on_game=write, stats=run.stats, timer=timer)
            run.wall += time.perf_counter() - t0
            run.cpu += time.process_time() - c0
            run.rounds += 1
            run.moves += sum(len(r.actions) for r in records)
            run.actions += [r.actions for r in records]
            if rounds is not None:
                if run.rounds >= rounds:
                    break
            elif (run.moves >= a.positions) if a.positions else (run.wall >= a.seconds):
                break
    run.games = len(run.actions)
    run.asked, run.hits, run.rows = ev.requested, ev.hits, ev.computed
    run.parts = dict(timer.seconds) if timer is not None else {}
    return run


def warm_up(game, inner, a) -> None:
    """Two short games: numba's kernels compiled (or loaded), the network's
    first calls made, before anything is timed."""
    from zeroloop.engine.nn import FixedBatchEvaluator
    from zeroloop.engine.search import SearchConfig
    from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games

    ev = FixedBatchEvaluator(inner, batch=a.eval_batch)
    play_selfplay_games(game, ev, SearchConfig(simulations=min(a.sims, 8)), SelfplayConfig(),
                        [np.random.SeedSequence([a.seed, 2**32 - 1, k]) for k in range(2)], in_flight=2)


def report(runs: list[Run], check: Run | None) -> None:
    from zeroloop.engine.timing import PARTS

    for r in runs:
        sims = r.stats.simulations
        print(f"{r.label:14s}: {sims / r.wall:10,.0f} simulations/s  {r.moves / r.cpu:8,.1f} positions/s "
              f"(moves per CPU-second; CPU {r.cpu / r.wall:.2f}x wall)  {r.games} games, {r.moves} moves, "
              f"{sims:,} simulations in {r.wall:.1f} s")
        print(f"{'':14s}  {r.rows:,} network rows, {sims / max(r.rows, 1):.2f} simulations per row, "
              f"cache hits {r.hits / max(r.asked, 1):.1%} of lookups")
    print("\nmicroseconds per simulation (share of self-play's wall), this run:")
    print("| part | " + " | ".join(r.label for r in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for part in [*PARTS, "other"]:
        cells = []
        for r in runs:
            s = r.parts[part] if part != "other" else r.wall - sum(r.parts.values())
            cells.append(f"{1e6 * s / r.stats.simulations:.2f} ({100 * s / r.wall:.1f}%)")
        print(f"| {part} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{1e6 * r.wall / r.stats.simulations:.2f}**" for r in runs) + " |")
    print("\nnetwork share (the network call, of self-play's wall): " + ", ".join(
        f"{r.label} {r.parts['network'] / r.wall:.1%}" for r in runs))
    print("coarse split (SearchStats, as the pipeline logs it): " + "; ".join(
        f"{r.label} network {r.stats.network_s / r.wall:.1%} tree {r.stats.tree_s / r.wall:.1%} "
        f"rules {r.stats.rules_s / r.wall:.1%}" for r in runs))
    base = runs[0]
    print(f"ratio to {base.label} (simulations/s, this run): " + ", ".join(
        f"{r.label} {(r.stats.simulations / r.wall) / (base.stats.simulations / base.wall):.3f}x"
        for r in runs[1:]) if len(runs) > 1 else f"ratio to {base.label}: one net only")
    by_label = {r.label: r for r in runs}
    for r in runs:  # a net played over states and over rows: the games they both played
        rows = by_label.get(r.label.removesuffix(" states")) if r.label.endswith(" states") else None
        if rows is not None:
            k = min(len(r.actions), len(rows.actions))
            speed = (rows.stats.simulations / rows.wall) / (r.stats.simulations / r.wall)
            print(f"{r.label} against {rows.label} (over rows): same games: "
                  f"{'yes' if r.actions[:k] == rows.actions[:k] else 'NO'} (the first {k}); "
                  f"rows {speed:.3f}x the simulations/s")
    if check is not None:
        same = check.actions == base.actions
        print(f"evaluator untimed, {base.label} again ({check.rounds} round(s), same seeds): same games: "
              f"{'yes' if same else 'NO'}; simulations/s {check.stats.simulations / check.wall:,.0f}, "
              f"the evaluator's laps cost {base.wall / check.wall - 1:+.1%} of the wall")


def main() -> None:
    from zeroloop.engine.search import SearchConfig
    from zeroloop.engine.selfplay import SelfplayConfig

    search, selfplay = SearchConfig(), SelfplayConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", default="const,5x64",
                   help=f"comma-separated net specs, each {SPEC_HELP} (default const,5x64: the "
                        "ceiling, then the default net; the first is the ratios' baseline)")
    p.add_argument("--game", default="connect4")
    p.add_argument("--games", type=int, default=256, help="games per round (default 256)")
    p.add_argument("--sims", type=int, default=search.simulations,
                   help=f"simulations per move (default {search.simulations}, the pipeline's)")
    p.add_argument("--in-flight", type=int, default=128,
                   help="games searched together (default 128, runtime.games_in_flight)")
    p.add_argument("--eval-batch", type=int, default=selfplay.eval_batch,
                   help=f"positions per network call (default {selfplay.eval_batch}, selfplay.eval_batch)")
    p.add_argument("--cache", type=int, default=100_000,
                   help="cached positions (default 100000, runtime.eval_cache; 0: off)")
    p.add_argument("--shard-games", type=int, default=selfplay.shard_games,
                   help=f"games per written shard (default {selfplay.shard_games}, selfplay.shard_games)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=30.0,
                        help="self-play seconds per net, in whole rounds (default 30; 0: one round)")
    budget.add_argument("--positions", type=int, default=0,
                        help="moves per net instead, in whole rounds (0: the --seconds budget)")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "int8"],
                   help="the nets' number format (default auto: what runtime.precision: auto picks here)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-timer-check", action="store_true",
                   help="skip playing the first net again with an untimed evaluator")
    a = p.parse_args()
    for name in ("games", "sims", "in_flight", "eval_batch", "shard_games"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.cache < 0 or a.seconds < 0 or a.positions < 0:
        p.error("--cache, --seconds and --positions must not be negative")

    import torch

    from zeroloop.engine.games import make_game
    from zeroloop.engine.nn.machine import describe, summary_line
    from zeroloop.engine.timing import PartTimer

    torch.set_num_threads(1)  # one worker process's share of the CPU, as the pipeline runs it
    try:
        game = make_game(a.game)
        specs = [s.strip() for s in a.nets.split(",") if s.strip()]
        if not specs:
            raise ValueError("--nets names no net")
        timers = [PartTimer() for _ in specs]
        nets = [inner_evaluator(s, game, precision=a.precision, seed=a.seed, timer=t)
                for s, t in zip(specs, timers)]
    except ValueError as exc:
        p.error(str(exc))

    print("machine: " + summary_line(describe("cpu", a.precision), a.precision))
    budget_text = (f"{a.positions} moves" if a.positions else f"{a.seconds:g} s of self-play" if a.seconds
                   else "one round")
    print(f"game {a.game}, {a.sims} sims/move, rounds of {a.games} games, {a.in_flight} in flight, "
          f"network batch {a.eval_batch}, cache {a.cache}, shards of {a.shard_games} games; one process, "
          f"1 torch thread; budget per net: {budget_text}")
    runs = []
    for (label, inner), timer in zip(nets, timers):
        warm_up(game, inner, a)
        timer.reset()
        runs.append(play(game, inner, label, a, timer=timer))
    check = None
    if not a.no_timer_check:
        _, untimed = inner_evaluator(specs[0], game, precision=a.precision, seed=a.seed)
        warm_up(game, untimed, a)
        check = play(game, untimed, runs[0].label, a, timer=None, rounds=runs[0].rounds)
    report(runs, check)


if __name__ == "__main__":
    main()
