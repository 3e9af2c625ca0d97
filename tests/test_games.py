"""Compliance tests for every game, plus game-specific rule tests.

The compliance test runs :func:`~zeroloop.engine.games.check_game` over every
game: seeded random games checked against the conventions of
:mod:`zeroloop.engine.games.base` on every position reached (termination and
outcomes, legal masks and illegal moves, immutability, the input planes,
symmetries commuting with the rules, notation round trips); deliberately
broken games show that each check can fail, by name. The rules themselves are
cross-checked against small, slow reference implementations written here on
plain cell grids (k in a row; Othello moves and flips).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
from functools import cache

import numpy as np
import pytest

from zeroloop.engine.games import (
    ENTRY_POINT_GROUP,
    GAME_NAMES,
    ConnectFour,
    Game,
    GameCheckError,
    GameReport,
    Go,
    Gomoku,
    IllegalMoveError,
    Othello,
    State,
    Symmetry,
    TicTacToe,
    check_game,
    first_player_result,
    make_game,
    register_game,
    unregister_game,
)
from zeroloop.engine.games.check import GARBAGE as DEFAULT_GARBAGE
from zeroloop.engine.games.check import INVARIANTS

GAMES = ["tictactoe", "connect4", "gomoku", "gomoku-8x8-5", "othello", "othello-6x6", "go-5", "go-9"]
K_IN_A_ROW = ["tictactoe", "connect4", "gomoku", "gomoku-8x8-5"]
OTHELLOS = ["othello", "othello-6x6"]
#: the compliance test also runs on a non-square board (4 symmetries, not 8)
SYMMETRY_GAMES = GAMES + ["gomoku-5x7-4"]

#: random games played per game for the compliance checks
N_PLAYOUTS = {"othello": 8, "go-9": 8}
DEFAULT_PLAYOUTS = 20
#: positions per game on which the (costlier) symmetry checks run
N_SYMMETRY_STATES = 12
#: text every game's notation rejects ("0" too: none numbers moves from 0)
GARBAGE = (*DEFAULT_GARBAGE, "0")


# -- helpers -----------------------------------------------------------------


@cache
def game_of(name: str) -> Game:
    return make_game(name)


def random_playout(game: Game, seed: int) -> tuple[list[int], list[State]]:
    """Play uniformly random legal moves from the start until the game ends.

    Stops after ``max_moves + 1`` plies at the latest, so a game that fails to
    end within ``max_moves`` shows up as a too-long, unfinished playout
    instead of an endless loop.
    """
    rng = np.random.default_rng(seed)
    s = game.initial_state()
    actions, states = [], [s]
    while s.outcome is None and len(actions) <= game.max_moves:
        a = int(rng.choice(np.flatnonzero(game.legal_mask(s))))
        s = game.apply(s, a)
        actions.append(a)
        states.append(s)
    return actions, states


@cache
def playouts(name: str) -> tuple[tuple[tuple[int, ...], tuple[State, ...]], ...]:
    """The seeded random games of ``name`` (seeds 0..n-1), shared by the tests."""
    game = game_of(name)
    out = []
    for seed in range(N_PLAYOUTS.get(name, DEFAULT_PLAYOUTS)):
        actions, states = random_playout(game, seed)
        out.append((tuple(actions), tuple(states)))
    return tuple(out)


def popcount(x: int) -> int:
    return int(x).bit_count()


def grids(game: Game, s: State) -> tuple[np.ndarray, np.ndarray]:
    """Boolean ``[H, W]`` grids of the mover's and the opponent's stones."""
    x = game.encode([s])[0]
    return x[0] > 0.5, x[1] > 0.5


def ref_has_line(grid: np.ndarray, k: int) -> bool:
    """Slow reference: does ``grid`` hold ``k`` True cells in a row?"""
    h, w = grid.shape
    for r in range(h):
        for c in range(w):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                rr, cc = r + (k - 1) * dr, c + (k - 1) * dc
                if not (0 <= rr < h and 0 <= cc < w):
                    continue
                if all(grid[r + i * dr, c + i * dc] for i in range(k)):
                    return True
    return False


_DIRS8 = [(dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0)]


def ref_othello_flips(me: np.ndarray, opp: np.ndarray, r: int, c: int) -> list[tuple[int, int]]:
    """Slow reference: the discs a move by ``me`` on empty (r, c) flips."""
    h, w = me.shape
    if me[r, c] or opp[r, c]:
        return []
    flips = []
    for dr, dc in _DIRS8:
        run, rr, cc = [], r + dr, c + dc
        while 0 <= rr < h and 0 <= cc < w and opp[rr, cc]:
            run.append((rr, cc))
            rr, cc = rr + dr, cc + dc
        if run and 0 <= rr < h and 0 <= cc < w and me[rr, cc]:
            flips.extend(run)
    return flips


def ref_othello_moves(me: np.ndarray, opp: np.ndarray) -> set[int]:
    h, w = me.shape
    return {r * w + c for r in range(h) for c in range(w) if ref_othello_flips(me, opp, r, c)}


def play_text(game: Game, moves: str) -> State:
    s = game.initial_state()
    for a in game.parse_moves(moves):
        s = game.apply(s, a)
    return s


# -- compliance: every game --------------------------------------------------


def test_every_named_game_is_checked():
    """Every game make_game names by default is in the compliance test below."""
    assert set(GAME_NAMES) - {"gomoku-RxC-K", "go-N-komiK"} <= set(GAMES)


@pytest.mark.parametrize("name", SYMMETRY_GAMES)
def test_game_complies(name):
    """check_game's invariants (the protocol, termination and outcomes, legal
    masks and illegal moves, immutability, determinism, the input planes,
    symmetries commuting with the rules, notation) on seeded random games,
    then what is particular to each game."""
    game = game_of(name)
    lines = N_PLAYOUTS.get(name, DEFAULT_PLAYOUTS)
    report = check_game(game, lines=lines, symmetry_positions=N_SYMMETRY_STATES,
                        only_mover_wins=name not in OTHELLOS and not name.startswith("go-"),
                        garbage=GARBAGE)
    assert isinstance(report, GameReport) and report.game == game.name
    assert report.registered and report.lines == lines and sum(report.results) == lines
    assert report.positions > lines and report.symmetry_positions >= N_SYMMETRY_STATES
    assert report.checks == INVARIANTS
    # a fresh game object from the same name starts from the same position
    assert make_game(name).initial_state() == game.initial_state()
    if isinstance(game, ConnectFour):
        assert game.num_actions == game.cols
    elif isinstance(game, (Othello, Go)):
        assert game.num_actions == game.rows * game.cols + 1
        assert game.pass_action == game.rows * game.cols
        assert all(sym.action(game.pass_action) == game.pass_action for sym in game.symmetries())
    else:
        assert game.num_actions == game.rows * game.cols
    expected = 2 if isinstance(game, ConnectFour) else 8 if game.rows == game.cols else 4
    assert report.symmetries == len(game.symmetries()) == expected


def test_check_game_is_seeded():
    game = game_of("tictactoe")
    assert check_game(game, rng=5) == check_game(game, rng=np.random.default_rng(5))
    assert check_game(game, rng=5) != check_game(game, rng=6)
    assert check_game(game, lines=1).lines == 1
    with pytest.raises(ValueError, match="lines"):
        check_game(game, lines=0)


def test_connect4_last_move_plane_is_the_top_of_its_column():
    game = game_of("connect4")
    for actions, states in playouts("connect4"):
        x = game.encode(list(states))
        for a, p in zip(actions, x[1:]):
            cell = int(np.flatnonzero(p[2].reshape(-1))[0])
            assert cell % game.cols == a
            col = (p[0] + p[1])[:, a]
            assert cell // game.cols == int(np.flatnonzero(col)[0])


# -- check_game catches broken games --------------------------------------------


class FlipUpDownConnectFour(ConnectFour):
    """Claims that flipping the board upside down is a symmetry: gravity says no."""

    def symmetries(self):
        flip = np.arange(42).reshape(6, 7)[::-1].reshape(-1)
        return [Symmetry("identity", np.arange(42), np.arange(7)), Symmetry("flip_ud", flip, np.arange(7))]


class MisalignedSymmetryTicTacToe(TicTacToe):
    """rot90 moves the stones one way and the policy the other."""

    def symmetries(self):
        syms = super().symmetries()
        by_name = {s.name: s for s in syms}
        return [Symmetry(s.name, s.cell_src, by_name["rot270"].action_src) if s.name == "rot90" else s
                for s in syms]


class MutatingTicTacToe(TicTacToe):
    """apply writes the move into the state it was given."""

    def apply(self, state, action):
        child = super().apply(state, action)
        object.__setattr__(state, "last", action)
        return child


class ChannelsLastTicTacToe(TicTacToe):
    def encode(self, states):
        return np.ascontiguousarray(super().encode(states).transpose(0, 2, 3, 1))


class MoverWinsTicTacToe(TicTacToe):
    """Scores a win for the player who made the line: the classic flipped sign."""

    def apply(self, state, action):
        child = super().apply(state, action)
        if child.outcome:
            child = dataclasses.replace(child, outcome=-child.outcome)
        return child


class AlwaysXWinsTicTacToe(TicTacToe):
    def describe_outcome(self, state):
        return "game in progress" if state.outcome is None else "X wins"


class BoardInObjectTicTacToe(TicTacToe):
    """Plays on the board it returned last, not on the state it is given."""

    def initial_state(self):
        self._board = super().initial_state()
        return self._board

    def apply(self, state, action):
        self._board = super().apply(self._board, action)
        return self._board


class SharedMaskTicTacToe(TicTacToe):
    def legal_mask(self, state):
        self._mask = getattr(self, "_mask", None)
        if self._mask is None:
            self._mask = np.zeros(9, dtype=bool)
        self._mask[:] = super().legal_mask(state)
        return self._mask


class BlankWhenOverTicTacToe(TicTacToe):
    """Encodes a finished game as empty planes: planes must not read the outcome."""

    def encode(self, states):
        x = super().encode(states)
        x[[s.outcome is not None for s in states]] = 0.0
        return x


class ShortTicTacToe(TicTacToe):
    max_moves = 5


class OffByOneNotationTicTacToe(TicTacToe):
    def parse_action(self, text):
        return super().parse_action(text) + (text.strip() != "9")


@pytest.mark.parametrize("broken,kwargs,invariant,message", [
    (FlipUpDownConnectFour, {}, "symmetry",
     r"^symmetry 1 \(flip_ud\) does not commute with apply: .* "
     r"\(at the start position, move '1' \(action 0\)\)$"),
    (MisalignedSymmetryTicTacToe, {}, "symmetries",
     r"^symmetries: symmetry 5 \(rot90\): moves cell actions unlike their cells"),
    (MutatingTicTacToe, {}, "immutability",
     r"^immutability: apply mutated its input state: last -1 -> \d \(at the start position, move"),
    (ChannelsLastTicTacToe, {}, "encode",
     r"^encode: encode of 1 position\(s\) must give float32 planes \[B, P, H, W\] = \(1, 4, 3, 3\), "
     r"got float32 \(1, 3, 3, 4\) \(at the start position\)$"),
    (MoverWinsTicTacToe, {"only_mover_wins": True}, "outcome",
     r"^outcome: the side to move won by its opponent's move.*is the sign flipped\?.*\(at the position after "
     r"'\d+' = actions \[[\d, ]+\] \(ply \d\)\)$"),
    (AlwaysXWinsTicTacToe, {}, "outcome", r"^outcome: describe_outcome is 'X wins', but outcome .* means"),
    (BoardInObjectTicTacToe, {}, "determinism",
     r"^determinism: replaying the move gave IllegalMoveError\('the game is over.*\(does the game object "
     r"keep state\?\) \(at the position after"),
    (BlankWhenOverTicTacToe, {}, "encode",
     r"^encode: encode must read only me, opp, last, the side to move \(ply % 2\) and the state.s "
     r"planes_key: .*\(at the start position\)$"),
    (SharedMaskTicTacToe, {}, "legal mask",
     r"^legal mask: legal_mask returned an array the game keeps using .*\(at the start position\)$"),
    (ShortTicTacToe, {}, "termination",
     r"^termination: the game is still running after max_moves = 5 plies \(at the position after"),
    (OffByOneNotationTicTacToe, {}, "notation",
     r"^notation: parse_action\(format_action\(0\) = '1'\) gave 1, not 0$"),
])
def test_check_game_names_the_broken_invariant(broken, kwargs, invariant, message):
    with pytest.raises(GameCheckError, match=message) as info:
        check_game(broken(), **kwargs)
    assert isinstance(info.value, AssertionError)
    assert info.value.invariant == invariant and invariant in INVARIANTS


def test_check_game_error_gives_the_moves_to_the_broken_position():
    game = MoverWinsTicTacToe()
    assert check_game(game).game == "tictactoe"  # without the hint the flipped sign cannot show
    with pytest.raises(GameCheckError) as info:
        check_game(game, only_mover_wins=True)
    moves = info.value.moves
    assert moves and game.play(moves).outcome == 1.0
    assert game.format_moves(moves) in str(info.value)
    # the unbroken game, same line: the side to move has lost
    assert game_of("tictactoe").play(moves).outcome == -1.0


def test_check_game_reports_a_crash_where_it_happened():
    class CrashingEncode(TicTacToe):
        def encode(self, states):
            if any(s.ply == 3 for s in states):
                raise IndexError("plane out of range")
            return super().encode(states)

    with pytest.raises(GameCheckError, match=r"^encode: the game raised IndexError: plane out") as info:
        check_game(CrashingEncode())
    assert isinstance(info.value.__cause__, IndexError)


def test_make_game_names_and_unknown():
    assert (game_of("gomoku").rows, game_of("gomoku").cols, game_of("gomoku").k) == (6, 6, 4)
    g = game_of("gomoku-8x8-5")
    assert isinstance(g, Gomoku) and (g.rows, g.cols, g.k) == (8, 8, 5)
    assert isinstance(game_of("tictactoe"), TicTacToe)
    assert game_of("othello").rows == 8 and game_of("othello-6x6").rows == 6
    with pytest.raises(ValueError, match="unknown game"):
        make_game("chess")


@pytest.mark.parametrize("name", GAMES)
def test_seeded_playouts_are_reproducible(name):
    game = game_of(name)
    for seed in (0, 3, 7):
        a1, s1 = random_playout(game, seed)
        a2, s2 = random_playout(game, seed)
        assert a1 == a2 and s1 == s2
        assert a1 == list(playouts(name)[seed][0])
    # the seed matters: not all games are the same
    assert len({acts for acts, _ in playouts(name)}) > 1


# -- the registry: games from outside the package ------------------------------


class RenamedTicTacToe(TicTacToe):
    name = "tictactoe-renamed"


def test_register_game_makes_make_game_build_it():
    register_game("tictactoe-renamed", RenamedTicTacToe, description="tic-tac-toe by another name")
    try:
        game = make_game(" TicTacToe-Renamed ")
        assert isinstance(game, RenamedTicTacToe) and game.name == "tictactoe-renamed"
        assert GAME_NAMES["tictactoe-renamed"] == "tic-tac-toe by another name"
        assert check_game(game, lines=2).registered
        with pytest.raises(ValueError, match="is taken"):
            register_game("tictactoe-renamed", RenamedTicTacToe)
    finally:
        unregister_game("tictactoe-renamed")
    assert "tictactoe-renamed" not in GAME_NAMES
    with pytest.raises(ValueError, match="unknown game"):
        make_game("tictactoe-renamed")
    assert not check_game(RenamedTicTacToe(), lines=2).registered


@pytest.mark.parametrize("name,factory,message", [
    ("connect4", ConnectFour, "is taken"),
    ("gomoku-9x9-5", lambda: Gomoku(9, 9, 5), "is taken"),  # the pattern's names are taken too
    ("My Game", RenamedTicTacToe, "lowercase"),
    ("ttt", RenamedTicTacToe, "must build a Game named 'ttt'"),  # the pipeline rebuilds games by name
    ("thing", object, "must build a Game"),
])
def test_register_game_refuses(name, factory, message):
    before = dict(GAME_NAMES)
    with pytest.raises(ValueError, match=message):
        register_game(name, factory)
    assert GAME_NAMES == before


def test_a_registered_factory_that_changes_its_name_fails_by_name():
    built = itertools.chain([RenamedTicTacToe()], itertools.repeat(TicTacToe()))  # right once, then wrong
    register_game("tictactoe-renamed", lambda: next(built))
    try:
        with pytest.raises(ValueError, match="built a game named 'tictactoe'"):
            make_game("tictactoe-renamed")
        with pytest.raises(GameCheckError, match="^registry: make_game"):
            check_game(RenamedTicTacToe(), lines=1)
    finally:
        unregister_game("tictactoe-renamed")


@pytest.mark.slow
def test_entry_point_games_are_found_in_every_process(tmp_path, monkeypatch):
    """A package lists its games under the entry-point group; make_game finds
    them in any process (DVC stages, spawned workers) with no registration."""
    (tmp_path / "zl_plugin_games.py").write_text(
        "from zeroloop.engine.games import TicTacToe\n\n\n"
        "class PluginTicTacToe(TicTacToe):\n    name = 'tictactoe-plugin'\n")
    dist = tmp_path / "zl_plugin_games-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zl-plugin-games\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\ntictactoe-plugin = zl_plugin_games:PluginTicTacToe\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        game = make_game("tictactoe-plugin")
        assert type(game).__name__ == "PluginTicTacToe" and check_game(game, lines=2).registered
        with pytest.raises(ValueError, match="tictactoe-plugin"):  # listed among the valid names
            make_game("chess")
    finally:
        sys.modules.pop("zl_plugin_games", None)
    code = "from zeroloop.engine.games import make_game; print(make_game('tictactoe-plugin').name)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "tictactoe-plugin", out.stderr


# -- reference rules: k in a row ----------------------------------------------


@pytest.mark.parametrize("name", K_IN_A_ROW)
def test_k_in_a_row_outcomes_match_reference(name):
    """Every position of every playout: a game ends exactly when the last
    mover made k in a row (-1 for the side to move) or filled the board (0)."""
    game = game_of(name)
    for _, states in playouts(name):
        for s in states:
            me, opp = grids(game, s)
            assert not ref_has_line(me, game.k), "the side to move cannot have a line"
            mover_line = ref_has_line(opp, game.k)
            full = bool((me | opp).all())
            if mover_line:
                assert s.outcome == -1.0
            elif full:
                assert s.outcome == 0.0
            else:
                assert s.outcome is None


@pytest.mark.parametrize("name", K_IN_A_ROW)
def test_has_line_matches_reference_on_random_boards(name):
    game = game_of(name)
    rng = np.random.default_rng(99)
    hw = game.rows * game.cols
    for density in (0.3, 0.5, 0.7):
        for _ in range(60):
            cells = rng.random(hw) < density
            board = game.cells_to_bits(cells)
            expected = ref_has_line(cells.reshape(game.rows, game.cols), game.k)
            assert game.has_line(board) == expected, cells.reshape(game.rows, game.cols)


@pytest.mark.parametrize("name", [*K_IN_A_ROW, "gomoku-5x7-4"])
def test_fast_random_playout_plays_the_generic_rollouts_games(name):
    """The k-in-a-row games' ``random_playout`` (rollout UCT's and rollout_mix's
    hot loop) gives the result of the rollout through ``legal_mask``/``apply``
    from every position of the seeded games, drawing the same numbers: the
    generator is in the same state afterwards, so UCT's games do not change."""
    from zeroloop.engine.search.rollout import generic_rollout, random_rollout

    game = game_of(name)
    states = [s for seed in range(4) for s in random_playout(game, 100 + seed)[1]]
    results = set()
    for i, s in enumerate(states):
        fast_rng, slow_rng = np.random.default_rng(i), np.random.default_rng(i)
        fast = [random_rollout(game, s, fast_rng) for _ in range(3)]
        slow = [generic_rollout(game, s, slow_rng) for _ in range(3)]
        assert fast == slow, (game.format_moves([]), s)
        assert fast_rng.integers(1 << 62) == slow_rng.integers(1 << 62)
        results.update(fast)
    assert results == {-1.0, 0.0, 1.0} if name == "tictactoe" else results >= {-1.0, 1.0}


def test_connect_four_uct_kernel_searches_as_the_generic_uct():
    """Connect Four's rollout UCT kernel (the evaluation's baseline) gives the
    visits of the tree of Python nodes, move for move in the same order, from
    every running position of seeded games, at playout counts that leave
    moves untried, fill the tree, and reach its finished positions; it draws
    the same numbers, so the generator is in the same state afterwards."""
    from zeroloop.engine.search.uct import generic_uct_search, uct_search

    game = game_of("connect4")
    states = [s for seed in range(3) for s in random_playout(game, 300 + seed)[1] if s.outcome is None]
    assert len(states) > 40
    for i, s in enumerate(states):
        for playouts, c in ((1, 1.4), (5, 1.4), (60, 1.4), (400, 1.4), (200, 0.3)):
            fast_rng, slow_rng = np.random.default_rng(i), np.random.default_rng(i)
            fast = uct_search(game, s, playouts, c, fast_rng)
            slow = generic_uct_search(game, s, playouts, c, slow_rng)
            assert list(fast.items()) == list(slow.items()), (i, playouts, c)
            assert fast_rng.integers(1 << 62) == slow_rng.integers(1 << 62), (i, playouts, c)
    with pytest.raises(ValueError, match="finished game"):
        uct_search(game, random_playout(game, 300)[1][-1], 10, 1.4, np.random.default_rng(0))


# -- batched and unrolled rules (the search's hot paths) --------------------------


@pytest.mark.parametrize("name", GAMES)
def test_batched_legal_masks_are_the_masks_one_by_one(name):
    """``batched_legal_masks`` (the search's: a game's own ``legal_masks``, or
    the stacked fallback) gives each state's ``legal_mask``, finished games
    included, whatever the batch."""
    from zeroloop.engine.games.base import batched_legal_masks

    game = game_of(name)
    states = [s for _, sts in playouts(name) for s in sts]
    masks = batched_legal_masks(game)
    for batch in (states, states[:1], states[::-7]):
        got = masks(batch)
        assert got.dtype == np.bool_ and got.shape == (len(batch), game.num_actions)
        assert np.array_equal(got, np.stack([game.legal_mask(s) for s in batch]))


def test_batched_legal_masks_falls_back_when_a_subclass_changes_legal_mask():
    from zeroloop.engine.games.base import batched_legal_masks

    class NoCenter(ConnectFour):
        def legal_mask(self, state):
            mask = super().legal_mask(state)
            mask[3] = False
            return mask

    game, start = NoCenter(), ConnectFour().initial_state()
    assert batched_legal_masks(ConnectFour())([start]).all()
    assert not batched_legal_masks(game)([start])[0, 3]


def test_connect4_apply_is_the_generic_placement():
    """Connect Four's unrolled ``apply`` plays as the k-in-a-row code it
    replaces (the column's height, ``_place`` with ``has_line``) from every
    position of the seeded games, every column; full columns and finished
    games raise."""
    game = game_of("connect4")
    for _, states in playouts("connect4"):
        for s in states:
            for a in range(7):
                if s.outcome is not None:
                    with pytest.raises(IllegalMoveError):
                        game.apply(s, a)
                    continue
                h = game.height(s, a)
                if h == game.rows:
                    with pytest.raises(IllegalMoveError, match="is full"):
                        game.apply(s, a)
                    continue
                expected = game._place(s, a, game.cell_bits[game._column_cells[a][h]])
                assert game.apply(s, a) == expected
    for bad in (-1, 7):
        with pytest.raises(IllegalMoveError):
            game.apply(game.initial_state(), bad)


def test_connect4_rows_kernels_are_apply_legal_mask_and_encode():
    """Connect Four's positions as rows of arrays (the search's leaves in numba) give what its
    Python methods give: from every position of the seeded games and a drawn one, every legal
    column applied (position, ply, last move, outcome: win, draw or running), the legal masks, and
    the planes, padded with copies of the last row."""
    from zeroloop.engine.games.base import Rows

    game = game_of("connect4")
    draw = next(states for seed in range(5000) for states in [random_playout(game, seed)[1]]
                if states[-1].outcome == 0.0)
    running = [s for _, states in playouts("connect4") for s in states if s.outcome is None]
    running += [s for s in draw if s.outcome is None]
    pairs = [(i, a) for i, s in enumerate(running) for a in np.flatnonzero(game.legal_mask(s))]
    pos = Rows.empty(len(running) + len(pairs))
    for i, s in enumerate(running):
        pos.put(i, s)
    parents = np.array([i for i, _ in pairs], np.int64)
    actions = np.array([a for _, a in pairs], np.int64)
    leaves = np.arange(len(running), len(running) + len(pairs), dtype=np.int64)
    outcome = game.apply_rows(pos, parents, actions, leaves)
    expected = [game.apply(running[i], int(a)) for i, a in pairs]
    assert {e.outcome for e in expected} == {None, -1.0, 0.0}  # wins, the draw and running games
    for j, e in enumerate(expected):
        assert pos.state(int(leaves[j])) == dataclasses.replace(e, outcome=None)
        assert (np.isnan(outcome[j]) and e.outcome is None) or outcome[j] == e.outcome
    rows = np.arange(len(running), dtype=np.int64)
    assert np.array_equal(game.legal_rows(pos, rows), np.stack([game.legal_mask(s) for s in running]))
    assert np.array_equal(game.encode_rows(pos, rows), game.encode(running))
    some = rows[[3, 0, 17]]
    padded = game.encode_rows(pos, some, 8)
    assert np.array_equal(padded, game.encode([running[3], running[0]] + [running[17]] * 6))


# -- Connect Four ---------------------------------------------------------------


def test_connect4_full_column():
    game = game_of("connect4")
    s = play_text(game, "444444")
    assert s.outcome is None
    assert not game.legal_mask(s)[3] and game.legal_mask(s).sum() == 6
    with pytest.raises(IllegalMoveError, match="full"):
        play_text(game, "4444444")


@pytest.mark.parametrize("moves,winner", [
    ("1122334", "X"),      # horizontal, bottom row 1-4
    ("1212121", "X"),      # vertical, column 1
    ("12121232", "O"),     # vertical for the second player, column 2
    ("12234334544", "X"),  # rising diagonal 1a-2b-3c-4d
    ("76654554344", "X"),  # falling diagonal 4d-5c-6b-7a
])
def test_connect4_wins(moves, winner):
    game = game_of("connect4")
    before = play_text(game, moves[:-1])
    assert before.outcome is None
    s = game.apply(before, game.parse_action(moves[-1]))
    assert s.outcome == -1.0  # the side to move lost
    assert s.ply == len(moves)
    assert first_player_result(s) == (1.0 if winner == "X" else -1.0)
    assert f"{winner} wins" in game.render(s)
    assert not game.legal_mask(s).any()


def test_connect4_full_board_draw():
    game = game_of("connect4")
    for seed in range(5000):
        actions, states = random_playout(game, seed)
        if states[-1].outcome == 0.0:
            break
    else:
        pytest.fail("no drawn random game in 5000 seeds")
    final = states[-1]
    assert len(actions) == 42 and final.ply == 42
    assert popcount(final.me) == popcount(final.opp) == 21
    assert all(s.outcome is None for s in states[:-1])
    assert first_player_result(final) == 0.0
    assert not game.legal_mask(final).any()
    assert "draw" in game.render(final)
    # replaying the notation gives the same draw
    assert play_text(game, game.format_moves(actions)) == final
    assert sorted(np.bincount(actions, minlength=7).tolist()) == [6] * 7


def test_connect4_notation():
    game = game_of("connect4")
    assert game.parse_moves("4453") == [3, 3, 4, 2]
    assert game.parse_moves("44 53") == [3, 3, 4, 2]
    assert game.format_moves([3, 3, 4, 2]) == "4453"
    for bad in ("8", "0", "45a"):
        with pytest.raises(IllegalMoveError):
            game.parse_moves(bad)


# -- tic-tac-toe ------------------------------------------------------------------


def test_tictactoe_notation():
    game = game_of("tictactoe")
    assert game.parse_moves("159") == [0, 4, 8]
    assert game.format_moves([0, 4, 8]) == "159"
    # cells are numbered row by row from the top-left
    s = play_text(game, "3")
    me, opp = grids(game, s)
    assert opp[0, 2] and opp.sum() == 1 and me.sum() == 0


@pytest.mark.parametrize("moves,winner", [
    ("14253", "X"),      # top row 1-2-3
    ("12437", "X"),      # left column 1-4-7
    ("12539", "X"),      # diagonal 1-5-9
    ("31527", "X"),      # anti-diagonal 3-5-7
    ("152397", "O"),     # O on the anti-diagonal 3-5-7
    ("123476985", "X"),  # the ninth move fills the board and wins: a win, not a draw
])
def test_tictactoe_wins(moves, winner):
    game = game_of("tictactoe")
    before = play_text(game, moves[:-1])
    assert before.outcome is None
    s = game.apply(before, game.parse_action(moves[-1]))
    assert s.outcome == -1.0
    assert first_player_result(s) == (1.0 if winner == "X" else -1.0)
    assert f"{winner} wins" in game.render(s)


def test_tictactoe_draw():
    game = game_of("tictactoe")
    # X O X / X O O / O X X: no line for either side
    moves = "153287469"
    before = play_text(game, moves[:-1])
    assert before.outcome is None
    s = game.apply(before, game.parse_action(moves[-1]))
    assert s.ply == 9 and s.outcome == 0.0
    assert "draw" in game.render(s)


# -- gomoku 8x8, five in a row ------------------------------------------------------


def gomoku_play(game: Gomoku, x_cells: list[str], o_cells: list[str]) -> list[State]:
    """Alternate X and O moves (X first); the states after each move."""
    s, out = game.initial_state(), []
    seq = [c for pair in zip(x_cells, o_cells) for c in pair]
    if len(x_cells) > len(o_cells):
        seq.append(x_cells[-1])
    for cell in seq:
        s = game.apply(s, game.parse_action(cell))
        out.append(s)
    return out


def test_gomoku_five_wins_four_does_not():
    game = game_of("gomoku-8x8-5")
    states = gomoku_play(game, ["a1", "b1", "c1", "d1", "e1"], ["a8", "b8", "c8", "d8"])
    # four X (and four O) in a row: still running
    assert all(s.outcome is None for s in states[:-1])
    assert states[-1].outcome == -1.0 and first_player_result(states[-1]) == 1.0


def test_gomoku_overline_wins():
    game = game_of("gomoku-8x8-5")
    # X: a1 b1 c1 . e1 f1, then d1 makes six in a row
    states = gomoku_play(game, ["a1", "b1", "c1", "e1", "f1", "d1"],
                         ["a8", "b8", "c8", "e8", "f8"])
    assert all(s.outcome is None for s in states[:-1])
    assert states[-1].outcome == -1.0 and first_player_result(states[-1]) == 1.0


@pytest.mark.parametrize("x_cells", [
    ["f2", "g2", "h2", "a1", "b1"],  # end of one row + start of the next (row-major neighbours)
    ["g3", "h3", "a2", "b2", "c2"],
    ["b8", "a7", "h7", "g6", "f5"],  # cells 1, 8, 15, 22, 29: a diagonal only if rows wrapped
    ["g8", "h7", "a5", "b4", "c3"],  # cells 6, 15, 24, 33, 42: a diagonal only if rows wrapped
])
def test_gomoku_no_wrap_around(x_cells):
    game = game_of("gomoku-8x8-5")
    states = gomoku_play(game, x_cells, ["c5", "d5", "c6", "d6"])
    assert all(s.outcome is None for s in states)


def test_gomoku_vertical_and_diagonal_wins():
    game = game_of("gomoku-8x8-5")
    for x_cells in (["h4", "h5", "h6", "h7", "h8"], ["d4", "e5", "f6", "g7", "h8"],
                    ["a8", "b7", "c6", "d5", "e4"]):
        states = gomoku_play(game, x_cells, ["a1", "b2", "a2", "b1"])
        assert all(s.outcome is None for s in states[:-1]), x_cells
        assert states[-1].outcome == -1.0, x_cells


def test_gomoku_notation():
    game = game_of("gomoku-8x8-5")
    assert game.parse_action("a1") == 56  # bottom-left
    assert game.parse_action("a8") == 0   # top-left
    assert game.parse_action("H8") == 7
    assert game.parse_moves("c3 d4") == game.parse_moves("c3d4") == game.parse_moves("c3,d4")
    for bad in ("i1", "a9", "a0", "c3 zz"):
        with pytest.raises(IllegalMoveError):
            game.parse_moves(bad)


# -- Othello ------------------------------------------------------------------------


@pytest.mark.parametrize("name,moves", [
    ("othello", {"d3", "c4", "f5", "e6"}),
    ("othello-6x6", {"c2", "b3", "e4", "d5"}),
])
def test_othello_start(name, moves):
    game = game_of(name)
    s = game.initial_state()
    assert popcount(s.me) == popcount(s.opp) == 2
    legal = {game.format_action(a) for a in np.flatnonzero(game.legal_mask(s))}
    assert legal == moves
    with pytest.raises(IllegalMoveError):
        game.apply(s, game.pass_action)
    with pytest.raises(IllegalMoveError):
        game.apply(s, game.parse_action("a1"))


def test_othello_after_f5():
    game = game_of("othello")
    s = play_text(game, "f5")
    # O to move: O has 1 disc (d4), X has 4 (d5 e4 e5 f5)
    assert popcount(s.opp) == 4 and popcount(s.me) == 1
    assert "discs X 4 - O 1" in game.render(s)
    me, opp = grids(game, s)
    assert me[3, 3]  # d4
    assert opp[4, 3] and opp[3, 4] and opp[4, 4] and opp[4, 5]  # d5 e4 e5 f5
    assert game.parse_moves("f5d6c3") == game.parse_moves("f5 d6 c3") == game.parse_moves("F5, D6, C3")
    assert game.parse_action("PASS") == game.pass_action


@pytest.mark.parametrize("name", OTHELLOS)
def test_othello_moves_match_reference(name):
    """Legal moves, flips, passes and game end against a plain grid walk."""
    game = game_of(name)
    for actions, states in playouts(name):
        for s, a, t in zip(states[:-1], actions, states[1:]):
            me, opp = grids(game, s)
            ref = ref_othello_moves(me, opp)
            mask = game.legal_mask(s)
            if ref:
                assert set(np.flatnonzero(mask[:-1]).tolist()) == ref and not mask[-1]
            else:
                assert mask[-1] and mask.sum() == 1, "pass only when there is no other move"
            t_me, t_opp = grids(game, t)
            if a == game.pass_action:
                assert np.array_equal(t_me, opp) and np.array_equal(t_opp, me)
                continue
            r, c = divmod(a, game.cols)
            new_me = me.copy()
            new_opp = opp.copy()
            new_me[r, c] = True
            for rr, cc in ref_othello_flips(me, opp, r, c):
                new_me[rr, cc], new_opp[rr, cc] = True, False
            assert np.array_equal(t_opp, new_me) and np.array_equal(t_me, new_opp)
        final = states[-1]
        me, opp = grids(game, final)
        assert not ref_othello_moves(me, opp) and not ref_othello_moves(opp, me)
        for s in states[:-1]:
            me, opp = grids(game, s)
            assert ref_othello_moves(me, opp) or ref_othello_moves(opp, me)


@pytest.mark.parametrize("name", OTHELLOS)
def test_othello_outcome_sign_matches_disc_difference(name):
    game = game_of(name)
    for _, states in playouts(name):
        final = states[-1]
        diff = popcount(final.me) - popcount(final.opp)
        assert final.outcome == float(np.sign(diff))
        # the winner named by render agrees with the disc counts
        occ_first = final.me if final.ply % 2 == 0 else final.opp
        occ_second = final.opp if final.ply % 2 == 0 else final.me
        assert first_player_result(final) == float(np.sign(popcount(occ_first) - popcount(occ_second)))
        assert f"discs X {popcount(occ_first)} - O {popcount(occ_second)}" in game.render(final)


@pytest.mark.parametrize("name", OTHELLOS)
def test_othello_game_with_a_pass(name):
    game = game_of(name)
    for seed in range(500):
        actions, states = random_playout(game, seed)
        if game.pass_action in actions:
            break
    else:
        pytest.fail("no random game with a pass in 500 seeds")
    i = actions.index(game.pass_action)
    before, after = states[i], states[i + 1]
    mask = game.legal_mask(before)
    assert mask[game.pass_action] and mask.sum() == 1
    assert after.ply == before.ply + 1
    assert after.first_to_move != before.first_to_move
    assert (after.me, after.opp) == (before.opp, before.me)
    assert after.last == game.pass_action
    x_before, x_after = game.encode([before, after])
    assert x_after[2].sum() == 0
    assert np.all(x_after[3] == 1 - x_before[3])
    assert after.outcome is None, "the other side must have a move after a pass"
    assert not game.legal_mask(after)[game.pass_action]
    # the next move is a real one
    assert actions[i + 1] != game.pass_action
    assert states[i + 2].last == actions[i + 1]
    assert "pass" in game.format_moves(actions).split()
    # symmetries keep the pass a pass
    for sym in game.symmetries():
        t = game.transform(after, sym)
        assert t.last == game.pass_action
        assert game.apply(game.transform(before, sym), game.pass_action) == t
    assert game.parse_moves(game.format_moves(actions)) == actions


@pytest.mark.parametrize("name", SYMMETRY_GAMES)
def test_encode_is_the_plane_by_plane_encoding(name):
    """Boards of at most 64 bits are encoded from one word per plane (a game's
    ``_plane_words``): the same planes, bit for bit, as the plane-by-plane
    encoding every board size can use."""
    game = game_of(name)
    states = [s for seed in range(3) for s in random_playout(game, 200 + seed)[1]]
    for batch in (states, states[:1], states[::-5]):
        got, expected = game.encode(batch), game._encode_cells(batch)
        assert got.dtype == expected.dtype == np.float32 and got.flags.c_contiguous
        assert np.array_equal(got[:, :4], expected[:, :4])
