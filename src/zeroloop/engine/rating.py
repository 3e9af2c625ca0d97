"""Match statistics for the arena gate and a league Elo fit.

All Elo values are logistic Elo: a difference of ``d`` Elo means an expected
score of ``1 / (1 + 10**(-d / 400))``. Draws always count as half a point.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from statistics import NormalDist
from typing import Any

import numpy as np

from zeroloop.engine.config import Annotated, at, check_fields

# Elo per natural-log unit of Bradley-Terry strength.
ELO_PER_NAT = 400.0 / math.log(10.0)


def expected_score(elo: float) -> float:
    """Expected score (in [0, 1]) of a player ``elo`` Elo stronger than its opponent."""
    return 1.0 / (1.0 + 10.0 ** (-elo / 400.0))


def score_to_elo(score: float) -> float:
    """Elo difference implied by an expected score in the open interval (0, 1)."""
    return -400.0 * math.log10(1.0 / score - 1.0)


@dataclass(frozen=True)
class MatchScore:
    """Result of a match between players A and B, counted from A's side.

    ``wins``, ``draws`` and ``losses`` are game counts (non-negative ints).
    """

    wins: int
    draws: int
    losses: int

    def __post_init__(self) -> None:
        for name in ("wins", "draws", "losses"):
            value = getattr(self, name)
            if not isinstance(value, Integral) or isinstance(value, bool) or value < 0:
                raise ValueError(f"MatchScore.{name} must be a non-negative int, got {value!r}")

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """A's points per game in [0, 1]; 0.5 when no games were played."""
        if self.games == 0:
            return 0.5
        return (self.wins + 0.5 * self.draws) / self.games

    @property
    def elo_diff(self) -> float:
        """Elo difference (A minus B) implied by the score.

        The score is clamped into [1/(2n), 1 - 1/(2n)] so that a clean sweep
        maps to a finite value growing with n, rather than to infinity.
        """
        n = self.games
        if n == 0:
            return 0.0
        margin = 1.0 / (2 * n)
        return score_to_elo(min(max(self.score, margin), 1.0 - margin))

    def variance(self) -> float:
        """Variance of one game's result (1, 0.5 or 0 points) in this sample,
        dividing by n (the maximum-likelihood estimate); 0.0 with no games."""
        n = self.games
        if n == 0:
            return 0.0
        x = self.score
        return (self.wins * (1.0 - x) ** 2 + self.draws * (0.5 - x) ** 2 + self.losses * x**2) / n

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Normal-approximation confidence interval of A's expected score.

        Uses the trinomial per-game variance, so draws narrow the interval as
        they should. The bounds are clipped to [0, 1]; a match with no spread
        (say all wins) gives a zero-width interval. With no games: (0, 1).
        """
        if not 0.0 < confidence < 1.0:
            raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
        n = self.games
        if n == 0:
            return (0.0, 1.0)
        z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
        half = z * math.sqrt(self.variance() / n)
        return (max(0.0, self.score - half), min(1.0, self.score + half))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary: the counts plus derived score, Elo and 95% interval."""
        lo, hi = self.interval()
        return {"wins": self.wins, "draws": self.draws, "losses": self.losses, "games": self.games,
                "score": self.score, "elo_diff": self.elo_diff, "interval95": [lo, hi]}


def paired_interval(pair_scores: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Normal-approximation interval of the expected score from the mean
    scores of game pairs (an opening played with both colours): the two games
    of a pair share their opening, so they are not independent, and the
    pairs' spread is the honest one. (0, 1) with fewer than two pairs."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    x = np.asarray(pair_scores, float)
    if len(x) < 2:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf(0.5 + confidence / 2.0)
    half = z * float(x.std(ddof=1)) / math.sqrt(len(x))
    return (max(0.0, float(x.mean()) - half), min(1.0, float(x.mean()) + half))


def gate_decision(score: MatchScore, threshold: float = 0.55, verdict: str | None = None) -> bool:
    """Whether the candidate (player A) passes the gate.

    With a sequential test's ``verdict`` ("accept" or "reject"), the verdict
    decides; its hypotheses lie either side of the threshold
    (:class:`GateTest`), so both rules ask the same question: is the
    candidate's expected score above ``threshold``? Otherwise (no test, or
    "continue" when the games ran out) the score must reach the threshold: a
    score exactly at it passes; a 1e-12 slack absorbs float rounding in
    ``(wins + draws/2) / games`` (e.g. 11/20 versus 0.55). A match with no
    games never passes: there is no evidence.
    """
    if not isinstance(threshold, Real) or not 0.0 < threshold <= 1.0:
        raise ValueError(f"gate.threshold must lie in (0, 1], got {threshold!r}")
    if verdict not in (None, "accept", "reject", "continue"):
        raise ValueError(f"verdict must be accept, reject or continue, got {verdict!r}")
    if score.games == 0:
        return False
    if verdict in ("accept", "reject"):
        return verdict == "accept"
    return score.score >= threshold - 1e-12


#: The pair scores of a colour-swapped pair of games: A's mean score over the two.
PAIR_SCORES = (0.0, 0.25, 0.5, 0.75, 1.0)


def pentanomial(pair_scores: Sequence[float]) -> list[int]:
    """How many pairs scored 0, 1/4, 1/2, 3/4 and 1 (``[5]`` counts)."""
    scores = np.asarray(pair_scores, float).ravel()
    k = np.rint(4 * scores)
    bad = ~np.isfinite(k) | (k < 0) | (k > 4) | (np.abs(4 * scores - k) > 1e-9)
    if bad.any():
        got = float(scores[np.argmax(bad)])
        raise ValueError(f"a pair's mean score must be one of {PAIR_SCORES}, got {got!r}")
    return np.bincount(k.astype(np.int64), minlength=5).tolist()


@dataclass(frozen=True)
class SPRT:
    """Sequential probability ratio test over colour-swapped game pairs, to
    stop a gate match once its answer is clear.

    H0: the candidate is ``elo0`` Elo stronger; H1: it is ``elo1`` Elo stronger
    (elo1 > elo0). ``alpha`` is the chance of accepting at H0's strength,
    ``beta`` of rejecting at H1's. For the gate, :class:`GateTest` centres the
    two on the threshold's Elo (55%: +34.9 Elo), so that a verdict answers the
    gate's question: the candidate is accepted about half the time at exactly
    the threshold's strength, rarely below ``elo0`` and almost always above
    ``elo1``, as a long fixed-length match at the threshold would.

    The observations are the openings' game pairs, not the games: the two
    games of an opening share it and are correlated (in Connect Four one side
    wins much more often after a given opening, so an even pair is often one
    win and one loss). Each pair's mean score is one of 0, 1/4, 1/2, 3/4, 1 (the
    pentanomial model of chess-engine testing, Fishtest and OpenBench). The
    log-likelihood ratio is the generalised SPRT's normal approximation: with
    ``n`` pairs, ``x`` their mean score, ``var`` the variance of a pair's score
    in the sample and ``s0``, ``s1`` the hypotheses' expected scores,
    ``LLR = n * (s1 - s0) * (2x - s0 - s1) / (2 var)``.

    ``var_floor`` bounds the variance from below: a run of identical pairs has
    sample variance 0, which would make the LLR infinite. The default 0.025 is
    the pair variance of an even match whose games are independent with 80%
    draws (a per-game variance of 0.05, halved for a mean of two games).
    """

    elo0: float
    elo1: float
    alpha: Annotated[float, at.Interval(gt=0, lt=0.5)]
    beta: Annotated[float, at.Interval(gt=0, lt=0.5)]
    var_floor: Annotated[float, at.Gt(0)] = 0.025

    def __post_init__(self) -> None:
        if not self.elo1 > self.elo0:
            raise ValueError(f"SPRT needs elo1 > elo0, got elo0={self.elo0!r} elo1={self.elo1!r}")
        for name in ("alpha", "beta"):
            if not 0.0 < getattr(self, name) < 0.5:
                raise ValueError(f"SPRT.{name} must lie in (0, 0.5), got {getattr(self, name)!r}")
        if not self.var_floor > 0.0:
            raise ValueError(f"SPRT.var_floor must be positive, got {self.var_floor!r}")

    @property
    def lower_bound(self) -> float:
        return math.log(self.beta / (1.0 - self.alpha))

    @property
    def upper_bound(self) -> float:
        return math.log((1.0 - self.beta) / self.alpha)

    def llr(self, pair_scores: Sequence[float]) -> float:
        """Approximate log-likelihood ratio of H1 over H0 from the pairs' mean
        scores (each in {0, 1/4, 1/2, 3/4, 1}); 0.0 with no pairs."""
        counts = np.asarray(pentanomial(pair_scores), float)
        n = counts.sum()
        if n == 0:
            return 0.0
        values = np.asarray(PAIR_SCORES)
        x = float(counts @ values) / n
        var = max(float(counts @ (values - x) ** 2) / n, self.var_floor)
        s0, s1 = expected_score(self.elo0), expected_score(self.elo1)
        return n * (s1 - s0) * (2.0 * x - s0 - s1) / (2.0 * var)

    def status(self, pair_scores: Sequence[float]) -> str:
        """"accept" (H1: the candidate is better), "reject" (H0) or "continue"."""
        llr = self.llr(pair_scores)
        if llr >= self.upper_bound:
            return "accept"
        if llr <= self.lower_bound:
            return "reject"
        return "continue"


@dataclass(frozen=True, kw_only=True)
class GateTest:
    """The gate's sequential test (params.yaml ``gate.sprt``): an :class:`SPRT`
    over game pairs whose hypotheses lie ``elo_width / 2`` Elo either side of
    the threshold's Elo. The defaults were chosen from simulated error rates
    and games (docs/gate.md): at a 55% threshold, H0 = -0.1 and H1 = +69.9 Elo.

    elo_width: Elo between the hypotheses H0 and H1, centred on the Elo of
        ``gate.threshold`` (55%: +34.9).
    alpha: chance of accepting a candidate at H0's strength.
    beta: chance of rejecting a candidate at H1's strength.
    pair_var_floor: lower bound of a game pair's score variance in the test
        (a run of identical pairs has none).
    """

    elo_width: Annotated[float, at.Interval(gt=0, le=1000)] = 70.0
    alpha: Annotated[float, at.Interval(gt=0, lt=0.5)] = 0.1
    beta: Annotated[float, at.Interval(gt=0, lt=0.5)] = 0.1
    pair_var_floor: Annotated[float, at.Interval(gt=0, le=0.25)] = 0.025

    def __post_init__(self) -> None:
        check_fields(self, "gate.sprt")

    def sprt(self, threshold: float) -> SPRT:
        """The test for a gate at ``threshold`` (a score in (0, 1))."""
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"an SPRT gate needs a threshold in (0, 1), got {threshold!r}")
        mid = score_to_elo(threshold)
        return SPRT(mid - self.elo_width / 2.0, mid + self.elo_width / 2.0, self.alpha, self.beta,
                    self.pair_var_floor)


@dataclass(frozen=True)
class EloFit:
    """A fitted league: ratings in Elo and their covariance (the anchor's row
    and column are zero). :meth:`difference` gives a difference of two
    ratings with its standard error, which is smaller than either rating's
    own SE when the two players are linked by games, and larger when they
    share the anchor's uncertainty only."""

    names: tuple[str, ...]
    elo: np.ndarray
    cov: np.ndarray

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def rating(self, name: str) -> tuple[float, float]:
        i = self.names.index(name)
        return float(self.elo[i]), float(math.sqrt(max(self.cov[i, i], 0.0)))

    def difference(self, a: str, b: str) -> tuple[float, float]:
        """``elo(a) - elo(b)`` and its standard error."""
        i, j = self.names.index(a), self.names.index(b)
        var = self.cov[i, i] + self.cov[j, j] - 2.0 * self.cov[i, j]
        return float(self.elo[i] - self.elo[j]), float(math.sqrt(max(var, 0.0)))

    def as_dict(self) -> dict[str, tuple[float, float]]:
        return {n: self.rating(n) for n in self.names}


def unbounded_side(results: Iterable[tuple[str, str, float, float, float]], name: str,
                   anchor: str) -> str | None:
    """Where the games leave ``name``'s rating free to run off relative to
    ``anchor``: ``"above"``, ``"below"`` or None (bounded both ways; also for
    the anchor itself). Results are :func:`fit_league`'s. A rating is bounded
    above when a chain of players, each of whom took points (a win or a
    draw) from the one before, leads from ``name`` to the anchor; below when
    a chain leads there in which each player took points from the next. A
    player who beat every opponent in every game has no such chain upwards,
    and its fitted rating is its prior's, however many games it played."""
    took: dict[str, set[str]] = {}  # took[a]: the players a took points from
    gave: dict[str, set[str]] = {}  # gave[b]: the players that took points from b
    for a, b, w, d, lo in results:
        for scorer, other, points in ((a, b, w + d), (b, a, lo + d)):
            if points > 0:
                took.setdefault(scorer, set()).add(other)
                gave.setdefault(other, set()).add(scorer)

    def reaches(edges: dict[str, set[str]]) -> bool:
        seen, todo = {name}, [name]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt == anchor:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    if name == anchor:
        return None
    if not reaches(gave):
        return "above"
    return None if reaches(took) else "below"


def fit_elo(results: Iterable[tuple[str, str, float, float, float]], anchor: str,
            anchor_elo: float = 0.0, prior: float = 1e-3) -> dict[str, tuple[float, float]]:
    """``{name: (elo, standard_error)}``: :func:`fit_league` as a mapping."""
    return fit_league(results, anchor, anchor_elo, prior).as_dict()


def fit_league(results: Iterable[tuple[str, str, float, float, float]], anchor: str,
               anchor_elo: float = 0.0, prior: float = 1e-3) -> EloFit:
    """Bradley-Terry (logistic Elo) maximum-likelihood ratings for a league.

    Each result is ``(player_a, player_b, wins_a, draws, losses_a)``; counts may
    be fractional and repeated pairs add up. A draw is half a win each way, so a
    pair contributes ``s log p + (n - s) log(1 - p)`` with ``s`` A's points,
    ``n`` the games and ``p = sigmoid(r_a - r_b)`` in natural-log strengths.

    The log-likelihood is penalised by ``prior / 2 * (r - r_anchor)**2`` per
    non-anchor player (a Gaussian prior of variance 1/prior nat**2 centred on
    the anchor), which keeps clean sweeps finite and makes the problem strictly
    concave. With the default 1e-3 its bias is a fraction of an Elo for pairs
    with tens of games. A group of m players with no path of games to the
    anchor sits, on average, at the prior's centre with a standard error of
    about ``ELO_PER_NAT / sqrt(m * prior)`` (~13,700 Elo for m = 1): finite,
    but meaningless; differences within the group are still well determined.

    Returns the ratings in Elo, with the anchor fixed at ``anchor_elo`` and SE
    0, and their covariance: the inverse of the penalised observed information
    (negative Hessian) with the anchor held fixed. With no results at all the
    answer is just the anchor.
    """
    if not prior > 0.0:
        raise ValueError(f"fit_elo: prior must be positive, got {prior!r}")
    pairs = []
    names: dict[str, int] = {}
    for a, b, w, d, lo in results:
        if a == b:
            raise ValueError(f"fit_elo: player {a!r} plays itself")
        counts = (float(w), float(d), float(lo))
        if not all(math.isfinite(c) and c >= 0.0 for c in counts):
            raise ValueError(f"fit_elo: bad counts {counts!r} for {a!r} vs {b!r}")
        for p in (a, b):
            names.setdefault(p, len(names))
        pairs.append((names[a], names[b], counts[0] + 0.5 * counts[1], sum(counts)))
    if not pairs:
        return EloFit((anchor,), np.array([float(anchor_elo)]), np.zeros((1, 1)))
    if anchor not in names:
        raise ValueError(f"fit_elo: anchor {anchor!r} plays in no result")

    ia, ib, pts, games = (np.array(col) for col in zip(*pairs))
    ia, ib = ia.astype(np.intp), ib.astype(np.intp)
    k = len(names)
    free = np.array([i for i in range(k) if i != names[anchor]], dtype=np.intp)

    def objective(r: np.ndarray) -> float:
        diff = r[ia] - r[ib]
        # log(sigmoid(x)) = -log1p(exp(-x)), written stably for both signs.
        ll = -(pts * np.logaddexp(0.0, -diff) + (games - pts) * np.logaddexp(0.0, diff)).sum()
        return float(ll - 0.5 * prior * (r[free] ** 2).sum())

    def grad_hess(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = 0.5 * (1.0 + np.tanh(0.5 * (r[ia] - r[ib])))  # sigmoid without overflow
        g_pair = pts - games * p
        w_pair = games * p * (1.0 - p)
        g = np.bincount(ia, g_pair, k) - np.bincount(ib, g_pair, k)
        info = np.zeros((k, k))  # the negative Hessian: a weighted graph Laplacian
        rows, cols = np.r_[ia, ib, ia, ib], np.r_[ia, ib, ib, ia]
        np.add.at(info, (rows, cols), np.r_[w_pair, w_pair, -w_pair, -w_pair])
        return g[free] - prior * r[free], info[np.ix_(free, free)] + prior * np.eye(len(free))

    r = np.zeros(k)  # the anchor stays at 0 and is shifted to anchor_elo at the end
    for _ in range(200):
        g, info = grad_hess(r)
        step, base = np.linalg.solve(info, g), objective(r)
        # Newton can overshoot on the flat tails of a clean sweep; halve until the objective rises.
        while np.max(np.abs(step), initial=0.0) > 1e-13:
            trial = r.copy()
            trial[free] += step
            if objective(trial) >= base:
                r = trial
                break
            step = 0.5 * step
        if np.max(np.abs(step), initial=0.0) < 1e-11:
            break
    _, info = grad_hess(r)
    cov = np.zeros((k, k))
    cov[np.ix_(free, free)] = np.linalg.inv(info) * ELO_PER_NAT ** 2
    return EloFit(tuple(names), anchor_elo + ELO_PER_NAT * r, cov)
