"""The arena gate, measured by simulation: for each gate rule, how often it
promotes a candidate of a given true strength, and how many games it plays.

A gate rule is the pipeline's own: colour-swapped pairs of games, the SPRT of
zeroloop.engine.rating looked at every ``round_games`` games (as
zeroloop.pipeline.matches.play_match does), and gate_decision on the result.
Only the games are simulated. Each game's result follows the BayesElo model
(Coulom): with d the candidate's strength over the best model's, a the
first-move advantage and e the draw margin, all in Elo, the side moving
first wins with f(d + a - e) and loses with f(-(d + a) - e), f(x) = 1 / (1 +
10^(-x / 400)). e and a are solved from the draw rate and the first mover's
score between equal players (``--draw-rate``, ``--first-score``), d so that
the candidate's expected score over both colours is that of ``--elo`` in
logistic Elo (+35 Elo: 55%). Games of a pair are independent given their
colours; openings that favour one side more than others are not modelled.

    python benchmarks/gate_simulation.py                       # the table in docs/gate.md
    python benchmarks/gate_simulation.py --matches 2000 --draw-rate 0 --first-score 0.5
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np

from zeroloop.engine.rating import SPRT, GateTest, MatchScore, expected_score, gate_decision


def f(x):
    return 1.0 / (1.0 + 10.0 ** (-np.asarray(x, float) / 400.0))


def _solve(fn, target: float, lo: float, hi: float) -> float:
    """x in [lo, hi] with fn(x) = target, fn increasing (bisection)."""
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if fn(mid) < target else (lo, mid)
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class GameModel:
    """Win/draw/loss chances of the candidate moving first and second."""

    first: tuple[float, float, float]
    second: tuple[float, float, float]

    @classmethod
    def fit(cls, elo: float, draw_rate: float, first_score: float) -> GameModel:
        def probs(d: float, a: float, e: float):
            first = (float(f(d + a - e)), float(f(-(d + a) - e)))
            return first, (float(f(d - a - e)), float(f(-(d - a) - e)))

        def first_mover_score(a: float, e: float) -> float:
            (w, lo), _ = probs(0.0, a, e)
            return w + (1.0 - w - lo) / 2.0

        def draws(e: float, a: float) -> float:
            (w1, l1), (w2, l2) = probs(0.0, a, e)
            return 1.0 - (w1 + l1 + w2 + l2) / 2.0

        e = a = 0.0
        for _ in range(30):  # the two conditions interact a little: alternate until both hold
            e = _solve(lambda x, a=a: draws(x, a), draw_rate, 0.0, 4000.0) if draw_rate > 0 else 0.0
            a = _solve(lambda x, e=e: first_mover_score(x, e), first_score, -4000.0, 4000.0)

        def score(d: float) -> float:
            (w1, l1), (w2, l2) = probs(d, a, e)
            return (w1 + (1 - w1 - l1) / 2 + w2 + (1 - w2 - l2) / 2) / 2

        d = _solve(score, expected_score(elo), -4000.0, 4000.0)
        (w1, l1), (w2, l2) = probs(d, a, e)
        return cls((w1, 1 - w1 - l1, l1), (w2, 1 - w2 - l2, l2))

    def play_pairs(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``[n, 2]`` candidate results (+1 / 0 / -1), first game moving first."""
        out = np.empty((n, 2), np.int8)
        for col, (w, d, _) in enumerate((self.first, self.second)):
            u = rng.random(n)
            out[:, col] = np.where(u < w, 1, np.where(u < w + d, 0, -1))
        return out


@dataclass(frozen=True)
class GateRule:
    name: str
    games: int
    threshold: float = 0.55
    sprt: SPRT | None = None
    round_games: int = 20

    def run(self, pairs: np.ndarray) -> tuple[bool, int]:
        """(promoted, games played) for one match whose games are ``pairs``."""
        per_look = len(pairs) if self.sprt is None else max(1, self.round_games // 2)
        verdict, used = None, 0
        while used < len(pairs):
            used = min(used + per_look, len(pairs))
            if self.sprt is not None:
                verdict = self.sprt.status(((pairs[:used] + 1) / 2).mean(axis=1))
                if verdict != "continue":
                    break
        r = pairs[:used].ravel()
        score = MatchScore(int((r > 0).sum()), int((r == 0).sum()), int((r < 0).sum()))
        return gate_decision(score, self.threshold, verdict), 2 * used


def rules(threshold: float = 0.55) -> list[GateRule]:
    sprt = lambda width, a=0.05: GateTest(elo_width=width, alpha=a, beta=a).sprt(threshold)  # noqa: E731
    return [
        GateRule("fixed 40 games", 40, threshold),
        GateRule("fixed 100 games", 100, threshold),
        GateRule("fixed 200 games", 200, threshold),
        GateRule("SPRT width 35, at most 40", 40, threshold, sprt(35)),
        GateRule("SPRT width 35, at most 100", 100, threshold, sprt(35)),
        GateRule("SPRT width 35, at most 200", 200, threshold, sprt(35)),
        GateRule("SPRT width 70, a=b=0.1, at most 100", 100, threshold, sprt(70, 0.1)),
        GateRule("SPRT width 70, a=b=0.1, at most 200", 200, threshold, sprt(70, 0.1)),
    ]


def simulate(rule: GateRule, model: GameModel, matches: int, seed: int) -> tuple[float, float]:
    """(share promoted, mean games) over ``matches`` matches."""
    rng = np.random.default_rng(seed)
    promoted = games = 0
    for _ in range(matches):
        ok, n = rule.run(model.play_pairs(rule.games // 2, rng))
        promoted += ok
        games += n
    return promoted / matches, games / matches


def table(elos: list[float], matches: int, draw_rate: float, first_score: float, seed: int,
          threshold: float = 0.55) -> list[dict]:
    models = {e: GameModel.fit(e, draw_rate, first_score) for e in elos}
    rows = []
    for rule in rules(threshold):
        row = {"rule": rule.name}
        for k, e in enumerate(elos):
            # the same seed for every rule: rules of the same length play the same games
            row[e] = simulate(rule, models[e], matches, seed + k)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--matches", type=int, default=20000, help="simulated matches per rule and strength")
    p.add_argument("--elo", type=float, nargs="+", default=[-35.0, 0.0, 35.0, 70.0, 140.0],
                   help="the candidate's true strength over the best model (logistic Elo)")
    # defaults: the shipped Connect Four model against itself, 200 games at the gate's settings
    # (100 simulations, 2 random opening plies): 27% draws, the first mover scoring 41.5%
    p.add_argument("--draw-rate", type=float, default=0.27, help="share of draws between equal players")
    p.add_argument("--first-score", type=float, default=0.415,
                   help="the first mover's score between equal players (0.5: no advantage)")
    p.add_argument("--threshold", type=float, default=0.55, help="the gate's threshold score")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.matches < 1 or not 0 <= a.draw_rate < 1 or not 0 < a.first_score < 1:
        p.error("--matches must be >= 1, --draw-rate in [0, 1), --first-score in (0, 1)")
    t0 = time.perf_counter()
    rows = table(a.elo, a.matches, a.draw_rate, a.first_score, a.seed, a.threshold)
    se = 0.5 / math.sqrt(a.matches)
    print(f"gate at {a.threshold:.0%}; {a.matches} matches per cell (standard error <= {se:.1%}); "
          f"draw rate {a.draw_rate:.0%}, first mover's score {a.first_score:.0%} between equals")
    print("cells: chance of promotion / mean games played")
    head = " | ".join(f"{e:+.0f} Elo" for e in a.elo)
    print(f"| rule | {head} |")
    print("|---" * (len(a.elo) + 1) + "|")
    for row in rows:
        cells = " | ".join(f"{row[e][0]:.1%} / {row[e][1]:.0f}" for e in a.elo)
        print(f"| {row['rule']} | {cells} |")
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
