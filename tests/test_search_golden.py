"""Golden search results: every search variant on fixed positions, seeds and
a deterministic oracle, against the results stored in
``tests/data/search_golden.json`` (first written from commit cdcab39, before
the search core was restructured).

A change that is meant to leave the search as it is must pass unchanged. A
change that is meant to alter it regenerates the file on purpose and says so:

    PYTHONPATH=src python tests/test_search_golden.py

Visit counts, chosen moves and self-play moves are compared exactly; root
values and policy targets to 2e-6 (the oracle's numbers are exact on every
machine, libm's ``exp`` and ``log`` need not be).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from zeroloop.engine.games import make_game
from zeroloop.engine.games.base import State
from zeroloop.engine.nn import FixedBatchEvaluator
from zeroloop.engine.nn.inference import encode_padded
from zeroloop.engine.search import BatchedMCTS, SearchConfig, SearchResult
from zeroloop.engine.selfplay import SelfplayConfig, play_selfplay_games

GOLDEN = Path(__file__).parent / "data" / "search_golden.json"
TOLERANCE = 2e-6


def hash_oracle(game):
    """Priors and a value drawn from a generator seeded by the position alone
    (its stones and ply): the same answer for a position whatever its batch,
    on every machine (uniform doubles are exact, and nothing else is used)."""

    def evaluate(states):
        priors = np.empty((len(states), game.num_actions), np.float32)
        values = np.empty(len(states), np.float32)
        for i, s in enumerate(states):
            r = np.random.default_rng([s.me, s.opp, s.ply])
            priors[i] = r.random(game.num_actions) ** 3  # skewed: the prior matters
            values[i] = 2.0 * r.random() - 1.0
        return priors, values

    return evaluate


class PlanesOracle:
    """:func:`hash_oracle` answering a network's way, from encoded planes
    (``evaluate_planes``; Connect Four: the stones are the planes, the ply
    their count): behind a :class:`FixedBatchEvaluator` it lets the search
    keep its positions as rows of arrays, with the same answers."""

    pads = True

    def __init__(self, game) -> None:
        self.game, self._oracle = game, hash_oracle(game)
        self._bits = np.array([1 << int(b) for b in game.bit_of_cell], dtype=object)

    def evaluate_planes(self, planes):
        boards = [(int(self._bits[x[0].ravel() > 0].sum()), int(self._bits[x[1].ravel() > 0].sum()))
                  for x in planes]
        return self._oracle([State(me, opp, (me | opp).bit_count()) for me, opp in boards])

    def __call__(self, states, *, pad_to=0):
        return self.evaluate_planes(encode_padded(self.game, states, pad_to))


def _evaluator(game, rows: bool):
    """The golden runs' oracle; ``rows``: behind a small cache, over rows (Connect Four)."""
    return FixedBatchEvaluator(PlanesOracle(game), batch=8, cache=40) if rows else hash_oracle(game)


def _gumbel(**cfg):
    return {"algorithm": "gumbel", "reuse_tree": False, **cfg}


#: Positions searched together, a few plies in (the later ones drawn by ``random_line``): many positions
#: make many close choices, so that a small change in a score (c_puct by 1e-3) changes some visit count.
C4 = ["4433", "44", "1", "45551", "237", "1416", "757324", "572", "136254", "7664", "712346", "737", "6256"]
TTT = ["15", "", "2", "56781", "259", "1628", "958316", "692", "248375"]
GO = ["d4 c3", "", "c3 e5 d5"]
#: short openings, for searches that play two moves on (no game can end on the way)
C4_PLAYED = ["4433", "2", "1", "237", "572"]

#: name -> (game, opening moves per slot, search settings, how the search runs, root noise)
#: ``once``: one search of every slot together; ``reuse``: search, play the chosen move, search again
#: (twice); ``cap``: a full search with noise, the move, a fast one without (8 simulations), the move,
#: a full one.
CASES = {
    "ttt_puct": ("tictactoe", TTT, {"simulations": 50}, "once", False),
    "c4_puct": ("connect4", C4, {"simulations": 64}, "once", False),
    "go_puct": ("go-7", GO, {"simulations": 32}, "once", False),
    "ttt_c_base": ("tictactoe", TTT, {"simulations": 50, "c_base": 5.0}, "once", False),
    "c4_c_base": ("connect4", C4, {"simulations": 64, "c_base": 20.0, "c_puct": 1.0}, "once", False),
    "c4_fpu": ("connect4", C4, {"simulations": 64, "fpu": -0.5}, "once", False),
    "c4_fpu_reduction": ("connect4", C4, {"simulations": 64, "fpu_reduction": 0.3}, "once", False),
    "ttt_fpu_reduction": ("tictactoe", TTT, {"simulations": 50, "fpu_reduction": 0.25}, "once", False),
    "c4_noise": ("connect4", C4, {"simulations": 64}, "once", True),
    "c4_forced": ("connect4", C4, {"simulations": 64, "forced_playouts": 2.0}, "once", True),
    "c4_forced_c_base": ("connect4", C4, {"simulations": 64, "forced_playouts": 2.0, "c_base": 20.0,
                                          "dirichlet_epsilon": 0.0}, "once", True),
    "ttt_forced": ("tictactoe", TTT, {"simulations": 50, "forced_playouts": 2.0}, "once", True),
    "go_forced": ("go-7", GO, {"simulations": 32, "forced_playouts": 2.0}, "once", True),
    "c4_leaves": ("connect4", C4, {"simulations": 64, "leaves_per_game": 4}, "once", False),
    "c4_leaves_vloss": ("connect4", C4, {"simulations": 64, "leaves_per_game": 3, "virtual_loss": 2.0},
                        "once", True),
    "ttt_leaves": ("tictactoe", TTT, {"simulations": 50, "leaves_per_game": 4}, "once", False),
    "c4_reuse": ("connect4", C4_PLAYED, {"simulations": 64, "forced_playouts": 2.0}, "reuse", True),
    "c4_reuse_leaves": ("connect4", C4_PLAYED, {"simulations": 64, "leaves_per_game": 2}, "reuse", False),
    "c4_no_reuse": ("connect4", C4_PLAYED, {"simulations": 64, "reuse_tree": False}, "reuse", False),
    "c4_rollout": ("connect4", C4_PLAYED, {"simulations": 48, "rollout_mix": 0.5}, "once", False),
    "c4_cap": ("connect4", C4_PLAYED, {"simulations": 64, "forced_playouts": 2.0}, "cap", True),
    "c4_gumbel": ("connect4", C4, _gumbel(simulations=32, max_considered_actions=4), "once", True),
    "c4_gumbel_greedy": ("connect4", C4, _gumbel(simulations=32), "once", False),
    "c4_gumbel_minmax": ("connect4", C4, _gumbel(simulations=32, gumbel_q="minmax", c_scale=0.1), "once",
                         True),
    "ttt_gumbel": ("tictactoe", TTT, _gumbel(simulations=16, max_considered_actions=4, c_visit=10.0),
                   "once", True),
    "go_gumbel": ("go-7", GO, _gumbel(simulations=24, max_considered_actions=8), "once", True),
    "c4_gumbel_played": ("connect4", C4_PLAYED, _gumbel(simulations=16, max_considered_actions=4), "reuse",
                         True),
}

#: name -> (game, search settings, playout cap or None, games): seeded self-play, each game's moves
SELFPLAY = {
    "c4_selfplay_forced": ("connect4", {"simulations": 24, "forced_playouts": 2.0}, None, 4),
    "c4_selfplay_cap": ("connect4", {"simulations": 24, "forced_playouts": 2.0}, (0.5, 6), 4),
    "c4_selfplay_gumbel": ("connect4", _gumbel(simulations=16, max_considered_actions=4), None, 4),
    "ttt_selfplay_leaves": ("tictactoe", {"simulations": 24, "leaves_per_game": 2}, None, 4),
}


def _row(res: SearchResult) -> dict:
    """What the golden file keeps of a search: visits, root values, the policy
    target where it is not the visit distribution, the search's own moves."""
    visits = res.visits.astype(np.int64)
    out = {"visits": visits.tolist(), "value": [round(float(v), 7) for v in res.value]}
    share = visits / np.maximum(visits.sum(axis=1, keepdims=True), 1)
    if res.policy is not None and np.abs(res.policy - share).max() > 1e-7:
        out["policy"] = [[round(float(p), 7) for p in row] for row in res.policy]
    if res.action is not None:
        out["action"] = [int(a) for a in res.action]
    return out


def _chosen(res: SearchResult, j: int) -> int:
    return int(res.action[j]) if res.action is not None else int(res.visits[j].argmax())


#: the search settings the golden results were made with where a case leaves them out (the library's
#: defaults then; since issue 50 the library defaults to the shipped params.yaml's 64 simulations and
#: forced playouts 2)
BASE = {"simulations": 100, "forced_playouts": 0.0}


def _config(cfg: dict) -> SearchConfig:
    return SearchConfig(**{**BASE, **cfg})


def run_case(name: str, rows: bool = False) -> list[dict]:
    """The searches of one case of :data:`CASES`, as :func:`_row` keeps them
    (``rows``: :func:`_evaluator`'s)."""
    game_name, openings, cfg, how, noise = CASES[name]
    game = make_game(game_name)
    mcts = BatchedMCTS(game, _evaluator(game, rows), _config(cfg), len(openings),
                       rng=np.random.default_rng(0))
    assert (mcts.pos is not None) == (rows and not cfg.get("rollout_mix"))
    slots = list(range(len(openings)))
    for g, moves in enumerate(openings):
        mcts.set_root(g, game.play(game.parse_moves(moves)), rng=np.random.default_rng([7, g]))
    if how == "once":
        return [_row(mcts.search(slots, add_noise=noise))]
    steps = [(noise, None)] * 3 if how == "reuse" else [(True, None), (False, 8), (True, None)]
    out = []
    for i, (step_noise, sims) in enumerate(steps):
        res = mcts.search(slots, add_noise=step_noise, simulations=sims)
        out.append(_row(res))
        if i + 1 < len(steps):
            for j, g in enumerate(slots):
                mcts.advance(g, _chosen(res, j))
    return out


def run_selfplay(name: str, rows: bool = False) -> list[list[int]]:
    game_name, cfg, cap, games = SELFPLAY[name]
    game = make_game(game_name)
    seeds = [np.random.SeedSequence([3, k]) for k in range(games)]
    full, fast = cap or (1.0, 16)
    # Gumbel's golden games play the halving's winner at every ply, as all Gumbel self-play did
    # when they were made; since, moves within temperature_moves are drawn from the improved policy
    # (test_move_choice), so temperature_moves 0 keeps the winner throughout
    hot = 0 if cfg.get("algorithm") == "gumbel" else 6
    play = SelfplayConfig(temperature=1.0, temperature_moves=hot, full_search_probability=full,
                          fast_simulations=fast)
    records = play_selfplay_games(game, _evaluator(game, rows), _config(cfg), play, seeds, in_flight=3)
    return [[int(a) for a in r.actions] for r in records]


def generate() -> dict:
    return {"cases": {name: run_case(name) for name in CASES},
            "selfplay": {name: run_selfplay(name) for name in SELFPLAY}}


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_search_matches_its_golden_results(name, golden):
    _compare(name, run_case(name), golden["cases"][name])


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][0] == "connect4"])
def test_connect_four_searched_over_rows_matches_the_golden_results(name, golden):
    """The tree keeping its positions as rows of arrays (the leaves applied, checked, keyed,
    cached and encoded in numba) searches as with one State per node."""
    _compare(name, run_case(name, rows=True), golden["cases"][name])


@pytest.mark.parametrize("name", [n for n in SELFPLAY if SELFPLAY[n][0] == "connect4"])
def test_connect_four_self_play_over_rows_matches_the_golden_games(name, golden):
    assert run_selfplay(name, rows=True) == golden["selfplay"][name]


def _compare(name: str, got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want)):
        assert g["visits"] == w["visits"], f"{name}, search {step}: visit counts"
        assert g.get("action") == w.get("action"), f"{name}, search {step}: the search's move"
        np.testing.assert_allclose(g["value"], w["value"], atol=TOLERANCE, err_msg=f"{name}, search {step}")
        assert ("policy" in g) == ("policy" in w), f"{name}, search {step}: policy target kind"
        if "policy" in w:
            np.testing.assert_allclose(g["policy"], w["policy"], atol=TOLERANCE, err_msg=f"{name}, {step}")


@pytest.mark.parametrize("name", list(SELFPLAY))
def test_selfplay_matches_its_golden_games(name, golden):
    assert run_selfplay(name) == golden["selfplay"][name]


if __name__ == "__main__":
    data = generate()
    lines = ["{", '"cases": {']
    lines += [f"{json.dumps(k)}: {json.dumps(v)}," for k, v in data["cases"].items()]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["},", '"selfplay": {']
    lines += [f"{json.dumps(k)}: {json.dumps(v)}," for k, v in data["selfplay"].items()]
    lines[-1] = lines[-1].rstrip(",")
    lines += ["}", "}"]
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text("\n".join(lines) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")
