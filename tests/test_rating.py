"""Tests for zeroloop.engine.rating. Expected values are worked out by hand (in the
comments) or by brute force (grid search, finite differences, simulation),
never by calling the code under test a second way."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from zeroloop.engine.rating import (
    SPRT,
    GateTest,
    MatchScore,
    expected_score,
    fit_elo,
    gate_decision,
    pentanomial,
)

ELO_75 = 400 * math.log10(3)  # 75% = odds 3:1 -> 190.85 Elo


# ---------------------------------------------------------------- MatchScore


def test_score_and_interval_hand_computed():
    m = MatchScore(6, 2, 2)
    assert m.games == 10
    # (6 + 2/2) / 10
    assert m.score == pytest.approx(0.7)
    # 0.7 = odds 7:3 -> 400 * log10(7/3) = 147.19 Elo
    assert m.elo_diff == pytest.approx(147.19, abs=0.01)
    # Per-game variance: (6 * 0.3^2 + 2 * 0.2^2 + 2 * 0.7^2) / 10 = (0.54 + 0.08 + 0.98) / 10 = 0.16;
    # SE of the mean sqrt(0.16 / 10) = 0.126491; 95% z = 1.959964 -> half width 0.247918.
    lo, hi = m.interval()
    assert lo == pytest.approx(0.7 - 0.247918, abs=1e-5)
    assert hi == pytest.approx(0.7 + 0.247918, abs=1e-5)
    lo99, hi99 = m.interval(0.99)
    assert lo99 < lo and hi99 > hi


def test_draws_narrow_the_interval():
    # Same 0.5 score: 5-0-5 has per-game variance 0.25, 0-10-0 has 0.
    assert MatchScore(5, 0, 5).interval() != pytest.approx((0.5, 0.5))
    assert MatchScore(0, 10, 0).interval() == pytest.approx((0.5, 0.5))


def test_no_games():
    m = MatchScore(0, 0, 0)
    assert m.games == 0 and m.score == 0.5 and m.elo_diff == 0.0
    assert m.interval() == (0.0, 1.0)


def test_clipping():
    # 10-0: the score is clamped to 1 - 1/20 = 0.95 = odds 19:1 -> 400 * log10(19) = 511.5 Elo.
    assert MatchScore(10, 0, 0).elo_diff == pytest.approx(511.5, abs=0.1)
    assert MatchScore(0, 0, 10).elo_diff == pytest.approx(-511.5, abs=0.1)
    # 9-0-1: variance (9 * 0.01 + 0.81) / 10 = 0.09, SE sqrt(0.009) = 0.094868, half 0.185938:
    # the upper end 1.086 is clipped to 1, the lower one is 0.714062.
    lo, hi = MatchScore(9, 0, 1).interval()
    assert hi == 1.0
    assert lo == pytest.approx(0.714062, abs=1e-5)
    assert MatchScore(0, 0, 4).interval() == (0.0, 0.0)


def test_bad_match_scores():
    with pytest.raises(ValueError, match="MatchScore.losses"):
        MatchScore(1, 0, -1)
    with pytest.raises(ValueError, match="MatchScore.wins"):
        MatchScore(1.5, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="confidence"):
        MatchScore(1, 1, 1).interval(1.0)


def test_as_dict_is_json():
    d = json.loads(json.dumps(MatchScore(6, 2, 2).as_dict()))
    assert (d["wins"], d["draws"], d["losses"], d["games"]) == (6, 2, 2, 10)
    assert d["score"] == pytest.approx(0.7)
    assert d["interval95"][0] == pytest.approx(0.452082, abs=1e-5)


# ---------------------------------------------------------------- gate


def test_gate_at_below_and_above_threshold():
    assert gate_decision(MatchScore(11, 0, 9)) is True  # 11/20 = 0.55 exactly
    assert gate_decision(MatchScore(10, 2, 8)) is True  # (10 + 1)/20 = 0.55 via a draw
    assert gate_decision(MatchScore(10, 1, 9)) is False  # 10.5/20 = 0.525
    assert gate_decision(MatchScore(12, 0, 8)) is True  # 0.6
    assert gate_decision(MatchScore(54, 1, 45)) is False  # 54.5/100 = 0.545
    assert gate_decision(MatchScore(11, 0, 9), threshold=0.56) is False
    assert gate_decision(MatchScore(10, 0, 0), threshold=1.0) is True
    assert gate_decision(MatchScore(0, 0, 0), threshold=0.4) is False  # no evidence, no pass


@pytest.mark.parametrize("threshold", [0.0, -0.1, 1.01, float("nan")])
def test_gate_bad_threshold(threshold):
    with pytest.raises(ValueError, match="gate.threshold"):
        gate_decision(MatchScore(1, 0, 0), threshold)


# ---------------------------------------------------------------- SPRT


def test_sprt_decisions():
    sprt = SPRT(elo0=0, elo1=35, alpha=0.05, beta=0.05)
    # Bounds: log(0.95 / 0.05) = +2.944 and log(0.05 / 0.95) = -2.944.
    assert sprt.status([1.0] * 15) == "accept"
    assert sprt.status([0.0] * 15) == "reject"
    assert sprt.status([1.0, 0.5]) == "continue"
    assert sprt.status([]) == "continue"
    # Even pairs, each one win and one loss (pair score 0.5): no spread, so the floor 0.025 is the
    # variance. s0 = 0.5, s1 = 1/(1 + 10^(-35/400)) = 0.550199, x = 0.5:
    # LLR = n * 0.050199 * (1 - 1.050199) / 0.05 = -0.050399 n, below -2.944 from n = 59 pairs on.
    assert sprt.status([0.5] * 58) == "continue"
    assert sprt.status([0.5] * 59) == "reject"
    assert sprt.llr([0.5] * 100) == pytest.approx(-0.050399 * 100, rel=1e-4)


def test_sprt_llr_over_pairs_by_hand():
    # 8 pairs: counts 1, 0, 3, 2, 2 of pair scores 0, 1/4, 1/2, 3/4, 1.
    pairs = [0.0, 0.5, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0]
    assert pentanomial(pairs) == [1, 0, 3, 2, 2]
    assert pentanomial([]) == [0, 0, 0, 0, 0]
    for bad in (0.3, 1.25, -0.25, float("nan")):
        with pytest.raises(ValueError, match=f"must be one of .*, got {bad!r}"):
            pentanomial([0.5, bad, 0.25])
    # x = (0 + 1.5 + 1.5 + 2) / 8 = 5/8 = 0.625
    # var = (0.625^2 + 3 * 0.125^2 + 2 * 0.125^2 + 2 * 0.375^2) / 8
    #     = (0.390625 + 0.046875 + 0.03125 + 0.28125) / 8 = 0.75 / 8 = 0.09375
    # elo0 = 0, elo1 = 50: s0 = 0.5, s1 = 1 / (1 + 10^-0.125) = 0.571463
    # LLR = 8 * 0.071463 * (1.25 - 1.071463) / (2 * 0.09375) = 8 * 0.071463 * 0.178537 / 0.1875
    #     = 0.544372
    assert SPRT(elo0=0, elo1=50, alpha=0.05, beta=0.05).llr(pairs) == pytest.approx(0.544372, rel=1e-5)
    # the same 16 games counted as independent games (the 1/2 pairs each one win and one loss):
    # 9 wins, 2 draws, 5 losses, x = 0.625, per-game var = (9 * 0.375^2 + 2 * 0.125^2 + 5 * 0.625^2) / 16
    # = 0.203125, so LLR = 16 * 0.071463 * 0.178537 / (2 * 0.203125) = 0.502553: the pairs' variance
    # (0.09375) is below half the games' (0.1016), as colour-swapped pairs of one opening are
    games = MatchScore(9, 2, 5)
    assert games.score == 0.625 and games.variance() == pytest.approx(0.203125)


def test_sprt_pairs_must_be_pair_scores():
    with pytest.raises(ValueError, match="pair's mean score must be one of"):
        SPRT(0, 35, 0.05, 0.05).llr([0.3])
    with pytest.raises(ValueError, match="pair's mean score must be one of"):
        SPRT(0, 35, 0.05, 0.05).llr([1.5])


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_sprt_short_sweep_continues(k):
    # An even opponent gives k pairs won 2-0 with probability (1/4)^k: one pair (1/4 > alpha)
    # must not be enough to accept. With the floor: LLR = k * 0.050199 * 0.949801 / 0.05 = 0.9535 k,
    # accept (>= 2.944) needs 4 such pairs, which an even opponent without draws gives with
    # probability 1/256, inside alpha.
    status = SPRT(elo0=0, elo1=35, alpha=0.05, beta=0.05).status([1.0] * k)
    assert status == ("continue" if k < 4 else "accept")


def test_sprt_llr_sign():
    sprt = SPRT(elo0=0, elo1=35, alpha=0.05, beta=0.05)
    # The midpoint of the hypotheses' scores is 0.525: above it favours H1, below it H0.
    assert sprt.llr([0.75, 0.5] * 10) > 0  # 62.5%
    assert sprt.llr([0.5] * 19 + [0.75]) < 0  # 51.25%
    assert sprt.llr([]) == 0.0
    assert sprt.llr([1.0, 0.75] * 10) > sprt.llr([0.75, 0.5] * 10)  # the same spread, a higher score


def test_sprt_llr_matches_gaussian_likelihood_ratio_over_pairs():
    # The GSPRT statistic is the exact log-likelihood ratio of two normal models N(s1, var) and
    # N(s0, var) for the pairs' mean scores; sum it pair by pair.
    sprt = SPRT(elo0=-10, elo1=25, alpha=0.05, beta=0.05)
    rng = np.random.default_rng(4)
    pairs = list(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=37, p=[0.1, 0.2, 0.3, 0.25, 0.15]))
    x = np.array(pairs)
    s0, s1 = (1 / (1 + 10 ** (-e / 400)) for e in (-10, 25))
    brute = float((((x - s0) ** 2 - (x - s1) ** 2) / (2 * x.var())).sum())
    assert sprt.llr(pairs) == pytest.approx(brute, rel=1e-12)


def test_the_gate_sprt_is_centred_on_the_threshold():
    # 55% is 400 * log10(0.55 / 0.45) = 34.86 Elo; a width of 35 puts H0 at 17.36 and H1 at 52.36
    sprt = GateTest(elo_width=35.0, alpha=0.05, beta=0.05).sprt(0.55)
    assert (sprt.elo0, sprt.elo1) == pytest.approx((34.86 - 17.5, 34.86 + 17.5), abs=0.01)
    assert expected_score((sprt.elo0 + sprt.elo1) / 2) == pytest.approx(0.55)
    # a match at exactly 55% sits near the LLR's zero: the test leans neither way
    assert abs(sprt.llr([0.5] * 8 + [0.75] * 2)) < 0.05
    # the old test (H0 = 0, H1 = +35) accepted a 52.9% match; the gate's test rejects it
    pairs = [0.5] * 180 + [1.0] * 10 + [0.0] * 1 + [0.75] * 9
    assert SPRT(elo0=0, elo1=35, alpha=0.05, beta=0.05).status(pairs) == "accept"
    assert sprt.status(pairs) == "reject"
    # the default gate test: width 70, alpha = beta = 0.1, so H0 = -0.14 and H1 = +69.86 at 55%
    default = GateTest().sprt(0.55)
    got = (default.elo0, default.elo1, default.alpha, default.beta)
    assert got == pytest.approx((-0.14, 69.86, 0.1, 0.1), abs=0.01)
    with pytest.raises(ValueError, match="threshold in"):
        GateTest().sprt(1.0)
    with pytest.raises(ValueError, match="gate.sprt.elo_width=0.0: must be > 0"):
        GateTest(elo_width=0.0)


def test_sprt_bad_parameters():
    with pytest.raises(ValueError, match="elo1 > elo0"):
        SPRT(elo0=10, elo1=5, alpha=0.05, beta=0.05)
    with pytest.raises(ValueError, match="SPRT.alpha"):
        SPRT(0, 35, alpha=0.0, beta=0.05)


def _stop_rates(true_score: float, draw_rate: float, seed: int) -> dict[str, float]:
    """Independent games (no colour effect) in pairs, looked at every 5 pairs."""
    rng = np.random.default_rng(seed)
    trials, max_pairs, every = 400, 1500, 5
    win = true_score - draw_rate / 2
    u = rng.random((trials, max_pairs, 2))
    points = np.where(u < win, 1.0, np.where(u < win + draw_rate, 0.5, 0.0)).mean(axis=2)
    sprt, outcomes = SPRT(elo0=0, elo1=35, alpha=0.05, beta=0.05), []
    for t in range(trials):
        status = "continue"
        for n in range(every, max_pairs + 1, every):
            status = sprt.status(points[t, :n])
            if status != "continue":
                break
        outcomes.append(status)
    return {s: outcomes.count(s) / trials for s in ("accept", "reject", "continue")}


def test_sprt_error_rates_by_simulation():
    # Under H0 (even strength) false accepts, under H1 (+35 Elo) false rejects, should be near 5%.
    h0 = _stop_rates(0.5, 0.2, seed=1)
    assert h0["accept"] < 0.09 and h0["reject"] > 0.85
    h1 = _stop_rates(1 / (1 + 10 ** (-35 / 400)), 0.2, seed=2)
    assert h1["reject"] < 0.09 and h1["accept"] > 0.85


# ---------------------------------------------------------------- fit_elo


def test_two_players_75_percent():
    r = fit_elo([("a", "b", 3000, 0, 1000)], anchor="b")
    assert r["b"] == (0.0, 0.0)
    assert r["a"][0] == pytest.approx(ELO_75, abs=0.5)
    # Fisher information of d in nats: n p (1 - p) = 4000 * 0.1875 = 750 -> SE = 1/sqrt(750) nat
    # = 0.036515 * 400 / ln(10) = 6.343 Elo.
    assert r["a"][1] == pytest.approx(6.343, rel=0.01)


def test_draws_count_half():
    # 2000 wins + 2000 draws + 0 losses is 3000 of 4000 points: 75% again.
    r = fit_elo([("a", "b", 2000, 2000, 0)], anchor="b")
    assert r["a"][0] == pytest.approx(ELO_75, abs=0.5)


def test_se_halves_with_four_times_the_games():
    small = fit_elo([("a", "b", 300, 0, 100), ("b", "c", 200, 40, 160)], anchor="a")
    big = fit_elo([("a", "b", 1200, 0, 400), ("b", "c", 800, 160, 640)], anchor="a")
    for name in ("b", "c"):
        assert big[name][1] / small[name][1] == pytest.approx(0.5, abs=0.005)
        assert big[name][0] == pytest.approx(small[name][0], abs=0.5)


def test_transitive_chain():
    # a beats b 3:1, b beats c 3:1, so a-c odds are 9:1 (90%); ratings 0, -190.85, -381.70.
    chain = [("a", "b", 750, 0, 250), ("b", "c", 750, 0, 250)]
    for results in (chain, chain + [("a", "c", 900, 0, 100)]):
        r = fit_elo(results, anchor="a")
        assert r["b"][0] == pytest.approx(-ELO_75, abs=1.0)
        assert r["c"][0] == pytest.approx(-2 * ELO_75, abs=1.0)
    # The direct a-c games make c's rating more certain.
    assert fit_elo(chain + [("a", "c", 900, 0, 100)], "a")["c"][1] < fit_elo(chain, "a")["c"][1]


def test_anchor_keeps_its_value_and_order_does_not_matter():
    r = fit_elo([("a", "b", 30, 0, 10), ("c", "b", 5, 10, 5)], anchor="b", anchor_elo=1000.0)
    assert r["b"] == (1000.0, 0.0)
    assert r["a"][0] == pytest.approx(1000 + ELO_75, abs=2.0)
    flipped = fit_elo([("b", "a", 10, 0, 30), ("b", "c", 5, 10, 5)], anchor="b", anchor_elo=1000.0)
    for name in r:
        assert flipped[name] == pytest.approx(r[name], abs=1e-6)


def test_perfect_score_is_finite():
    r = fit_elo([("a", "b", 10, 0, 0), ("b", "c", 5, 0, 5)], anchor="b")
    elo, se = r["a"]
    assert math.isfinite(elo) and math.isfinite(se)
    assert elo > 300  # clearly above b, by far more than a 10-game 95% (511 Elo) clamp would hint
    loser = fit_elo([("a", "b", 0, 0, 20)], anchor="b")["a"]
    assert math.isfinite(loser[0]) and loser[0] < -300


def test_unconnected_players_are_finite_but_uncertain():
    r = fit_elo([("a", "b", 6, 0, 4), ("x", "y", 8, 0, 2)], anchor="a")
    for name in ("x", "y"):
        assert math.isfinite(r[name][0]) and r[name][1] > 1000
    # Their difference is still determined: 80% -> 400 * log10(4) = 240.8 Elo (prior bias aside).
    assert r["x"][0] - r["y"][0] == pytest.approx(240.8, abs=3)


def test_a_rating_is_bounded_only_through_a_chain_of_points_to_the_anchor():
    """A sweep of the anchor leaves a rating free upwards, and a chain of sweeps too; one
    game the champion did not win against a player the anchor bounds holds it; the fit's
    standard error agrees (thousands of Elo where free, a few hundred where held)."""
    from zeroloop.engine.rating import unbounded_side

    early = [("gen1", "uct", 12, 0, 18)]  # bounded both ways
    swept = [*early, ("gen2", "uct", 30, 0, 0), ("gen2", "gen1", 30, 0, 0)]
    assert unbounded_side(early, "gen1", "uct") is None and unbounded_side(early, "uct", "uct") is None
    assert unbounded_side(swept, "gen2", "uct") == "above"
    held = [*early, ("gen2", "uct", 30, 0, 0), ("gen2", "gen1", 20, 4, 6)]
    assert unbounded_side(held, "gen2", "uct") is None
    chain = [*held, ("gen3", "uct", 30, 0, 0), ("gen3", "gen2", 17, 1, 12)]  # through gen2 to gen1 to uct
    assert unbounded_side(chain, "gen3", "uct") is None
    assert unbounded_side([("a", "uct", 0, 0, 10)], "a", "uct") == "below"
    assert unbounded_side([("a", "uct", 0, 1, 9)], "a", "uct") is None  # a draw is points both ways
    assert unbounded_side([("x", "y", 5, 0, 5)], "x", "uct") == "above"  # no path to the anchor at all
    assert fit_elo(swept, anchor="uct")["gen2"][1] > 1000
    assert fit_elo(chain, anchor="uct")["gen3"][1] < 300


def _penalised_loglik(rb: np.ndarray, rc: np.ndarray, results, prior: float = 1e-3) -> np.ndarray:
    """Log-likelihood over a grid of (r_b, r_c) in nats with r_a = 0, written out pair by pair."""
    strength = {"a": 0.0, "b": rb, "c": rc}
    total = -0.5 * prior * (rb**2 + rc**2)
    for p, q, w, d, lo in results:
        diff = strength[p] - strength[q]
        pts, games = w + d / 2, w + d + lo
        p_win = 1 / (1 + np.exp(-diff))
        total = total + pts * np.log(p_win) + (games - pts) * np.log(1 - p_win)
    return total


SMALL = [("a", "b", 7, 2, 3), ("b", "c", 5, 1, 6), ("a", "c", 4, 0, 2)]


def test_mle_matches_grid_search():
    grid = np.arange(-4, 4, 0.02)
    rb, rc = np.meshgrid(grid, grid, indexing="ij")
    i, j = np.unravel_index(np.argmax(_penalised_loglik(rb, rc, SMALL)), rb.shape)
    fine_b = np.arange(grid[i] - 0.04, grid[i] + 0.04, 0.0002)
    fine_c = np.arange(grid[j] - 0.04, grid[j] + 0.04, 0.0002)
    rb, rc = np.meshgrid(fine_b, fine_c, indexing="ij")
    i, j = np.unravel_index(np.argmax(_penalised_loglik(rb, rc, SMALL)), rb.shape)
    r = fit_elo(SMALL, anchor="a")
    nat = 400 / math.log(10)
    assert r["b"][0] == pytest.approx(fine_b[i] * nat, abs=0.1)
    assert r["c"][0] == pytest.approx(fine_c[j] * nat, abs=0.1)


def test_fit_is_a_stationary_point_of_the_penalised_likelihood():
    r = fit_elo(SMALL, anchor="a")
    x = np.array([r["b"][0], r["c"][0]]) / (400 / math.log(10))
    f = lambda v: float(_penalised_loglik(np.float64(v[0]), np.float64(v[1]), SMALL))
    h = 1e-6
    grad = [(f(x + e * h) - f(x - e * h)) / (2 * h) for e in np.eye(2)]
    assert np.max(np.abs(grad)) < 1e-6


def test_perfect_score_matches_grid_search():
    # 10-0 with the 1e-3 prior: maximise -10 log(1 + e^-d) - 0.0005 d^2 over a fine grid of d (nats).
    d = np.arange(0.0, 20.0, 1e-5)
    best = d[np.argmax(-10 * np.log1p(np.exp(-d)) - 0.5e-3 * d**2)]
    r = fit_elo([("a", "b", 10, 0, 0)], anchor="b")
    assert r["a"][0] == pytest.approx(best * 400 / math.log(10), abs=0.01)


def test_one_pair_closed_form():
    # 7-2-3: 8 of 12 points, odds 2:1, so d = ln 2 nat = 120.41 Elo (prior shifts it ~0.05 Elo).
    assert fit_elo([("a", "b", 7, 2, 3)], anchor="b")["a"][0] == pytest.approx(120.41, abs=0.1)


def test_standard_errors_match_finite_difference_hessian():
    r = fit_elo(SMALL, anchor="a")
    nat = 400 / math.log(10)
    x = np.array([r["b"][0], r["c"][0]]) / nat
    h, hess = 1e-4, np.zeros((2, 2))
    f = lambda v: float(_penalised_loglik(np.float64(v[0]), np.float64(v[1]), SMALL))
    for k in range(2):
        for m in range(2):
            ek, em = np.eye(2)[k] * h, np.eye(2)[m] * h
            hess[k, m] = (f(x + ek + em) - f(x + ek - em) - f(x - ek + em) + f(x - ek - em)) / (4 * h * h)
    se = np.sqrt(np.diag(np.linalg.inv(-hess))) * nat
    assert r["b"][1] == pytest.approx(se[0], rel=1e-4)
    assert r["c"][1] == pytest.approx(se[1], rel=1e-4)


def test_fit_elo_edge_cases():
    assert fit_elo([], anchor="a", anchor_elo=5.0) == {"a": (5.0, 0.0)}
    with pytest.raises(ValueError, match="anchor"):
        fit_elo([("a", "b", 1, 0, 1)], anchor="z")
    with pytest.raises(ValueError, match="plays itself"):
        fit_elo([("a", "a", 1, 0, 1)], anchor="a")
    with pytest.raises(ValueError, match="bad counts"):
        fit_elo([("a", "b", -1, 0, 1)], anchor="a")


def test_a_difference_between_linked_players_is_known_better_than_either_rating():
    from zeroloop.engine.rating import fit_league

    # a and b meet the anchor rarely but each other often: their gap is well measured, their level is not
    fit = fit_league([("a", "u", 18, 0, 12), ("b", "u", 17, 0, 13), ("a", "b", 300, 0, 300)], anchor="u")
    (ra, sa), (rb, sb) = fit.rating("a"), fit.rating("b")
    diff, se = fit.difference("a", "b")
    assert diff == pytest.approx(ra - rb)
    assert se < 0.5 * min(sa, sb)
    assert fit.difference("a", "a") == (0.0, 0.0)
    assert fit.rating("u") == (0.0, 0.0)
    # a player with no path of games to the anchor has a huge SE, and so has its difference to the anchor
    split = fit_league([("a", "u", 18, 0, 12), ("x", "y", 10, 0, 10)], anchor="u")
    assert split.difference("x", "u")[1] > 1000 > split.rating("a")[1]


def test_the_sprt_verdict_decides_the_gate_when_there_is_one():
    s = MatchScore(21, 0, 19)  # 52.5%: below a 55% threshold
    assert not gate_decision(s, 0.55)
    assert gate_decision(s, 0.55, "accept")  # the test accepted: the threshold does not overrule it
    assert not gate_decision(MatchScore(30, 0, 10), 0.55, "reject")
    assert gate_decision(MatchScore(30, 0, 10), 0.55, "continue")  # games ran out: the threshold decides
    with pytest.raises(ValueError, match="verdict must be"):
        gate_decision(s, 0.55, "maybe")


def test_paired_interval_uses_the_spread_of_opening_pairs():
    from zeroloop.engine.rating import paired_interval

    # every pair split 1-1: each pair scores 0.5 exactly, so the pairs say 0.5 with no doubt,
    # while the per-game interval treats the 40 games as independent coin flips
    pairs = [0.5] * 20
    assert paired_interval(pairs) == (0.5, 0.5)
    assert MatchScore(20, 0, 20).interval() != (0.5, 0.5)
    # the pairs' own spread, by hand: scores 0, 1 alternating over 10 pairs, sd = 0.527
    lo, hi = paired_interval([0.0, 1.0] * 5)
    half = 1.959964 * np.std([0.0, 1.0] * 5, ddof=1) / np.sqrt(10)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half), abs=1e-5)
    assert paired_interval([0.7]) == (0.0, 1.0)
