"""``check_game``: the compliance checks every game passes, as one call.

It plays seeded random games to the end and checks the conventions of
:mod:`zeroloop.engine.games.base` on every position reached; the first broken
invariant raises :class:`GameCheckError`, whose message names the invariant and
the position (the moves from the start) and move where it broke::

    check_game(MyGame())            # -> GameReport, or raises GameCheckError

What is checked, by the ``invariant`` key a failure carries:

* ``protocol``: the members of :class:`~zeroloop.engine.games.base.Game`, sizes
  that are positive ints, the start position (ply 0, no last move, running).
* ``registry``: when ``make_game(game.name)`` knows the name, it builds this
  game (same sizes, same start): the pipeline rebuilds games by name.
* ``notation``: every action formats to text that parses back; a game's moves
  format and parse back and replay to the same end; garbage raises
  IllegalMoveError with a message.
* ``symmetries``: identity first, each map a permutation, names and maps unique,
  closed under composition, cell actions moved like their cells.
* ``termination``: every game ends within ``max_moves`` plies.
* ``legal mask``: ``[A]`` bool, a fresh array, some move while running, none at the end.
* ``illegal moves``: illegal and out-of-range actions, and any move in a finished
  game, raise IllegalMoveError.
* ``apply``: returns a new State with ply + 1 and ``last`` = the action.
* ``immutability``: states are frozen and ``apply`` leaves its input alone.
* ``determinism``: replaying a move gives the same position (no hidden state
  in the game object).
* ``outcome``: None while running, then +1/0/-1 from the side to move;
  ``describe_outcome`` agrees with it; with ``only_mover_wins``, no finished
  game is a win for the side to move.
* ``render``: a non-empty board text that states the result of a finished game.
* ``encode``: float32 ``[B, P, H, W]``, batch = one by one, reading only
  ``me``, ``opp``, ``last``, ``ply % 2`` (and a state's ``planes_key``);
  binary stone planes matching the bitboards, a one-hot last-move plane (empty at the start and after a pass)
  on a stone the mover just placed, the colour plane.
* ``symmetry``: each symmetry commutes with ``encode``, ``legal_mask`` and
  ``apply`` (``apply(transform(s), sym.action(a)) == transform(apply(s, a))``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

import numpy as np

from zeroloop.engine.games.base import (
    NUM_PLANES,
    Game,
    IllegalMoveError,
    State,
    Symmetry,
    first_player_result,
    input_planes,
)

#: Text that no game's notation should read as a move.
GARBAGE = ("?", "!!", "zz", "z99")

#: The invariants check_game checks: the keys a GameCheckError carries.
INVARIANTS = (
    "protocol", "registry", "symmetries", "notation", "termination", "legal mask", "illegal moves",
    "apply", "immutability", "determinism", "outcome", "render", "encode", "symmetry",
)

_RESULT_TEXT = {1.0: "X wins", 0.0: "draw", -1.0: "O wins"}  # by first_player_result


class GameCheckError(AssertionError):
    """A game broke an invariant of the Game protocol.

    ``invariant`` is one of :data:`INVARIANTS`; ``moves`` are the actions from the
    start to the position where it broke (None for a check of no position).
    """

    def __init__(self, invariant: str, message: str, moves: Sequence[int] | None = None) -> None:
        super().__init__(message)
        self.invariant = invariant
        self.moves = None if moves is None else list(moves)


@dataclass(frozen=True)
class GameReport:
    """What :func:`check_game` checked on a game that passed."""

    game: str
    lines: int  # random games played to the end
    positions: int  # distinct positions checked
    symmetry_positions: int  # positions on which each symmetry was checked
    symmetries: int
    longest: int  # plies of the longest game played
    results: tuple[int, int, int]  # games won by the first player, drawn, won by the second
    registered: bool  # make_game(game.name) builds this game
    checks: tuple[str, ...] = INVARIANTS

    def __str__(self) -> str:
        x, d, o = self.results
        return (f"{self.game}: {self.lines} games (X {x}, draws {d}, O {o}; longest {self.longest} plies), "
                f"{self.positions} positions, {self.symmetries} symmetries on {self.symmetry_positions}"
                f" positions, {'registered' if self.registered else 'not registered'}: all checks passed")


def check_game(game: Game, *, rng: int | np.random.Generator = 0, lines: int = 20,
               symmetry_positions: int = 12, only_mover_wins: bool = False,
               cell_actions: bool | None = None, garbage: Sequence[str] = GARBAGE) -> GameReport:
    """Check ``game`` against the Game protocol's invariants on random games.

    Args:
        rng: a seed or a ``numpy.random.Generator``; the games played (and so
            the check) depend on nothing else. Default 0: the same games every run.
        lines: random games played from the start to the end.
        symmetry_positions: positions (besides the start and one finished
            position) on which every symmetry is checked against every legal move.
        only_mover_wins: the game can only be won by the move that wins it
            (k in a row, Connect Four, Hex): then every decisive end must read
            -1 for the side to move, which catches a flipped outcome sign.
        cell_actions: actions ``0..H*W-1`` are the cells, row-major (a placement
            move marks its own cell; symmetries move such actions like their cells).
            Default: true when ``num_actions >= rows * cols``.
        garbage: text that ``parse_action`` and ``parse_moves`` must reject.

    Returns the :class:`GameReport`; raises :class:`GameCheckError` at the first
    broken invariant.
    """
    if lines < 1 or symmetry_positions < 0:
        raise ValueError(f"lines must be >= 1 and symmetry_positions >= 0, got {lines}, {symmetry_positions}")
    checker = _Checker(game, np.random.default_rng(rng), only_mover_wins, cell_actions)
    try:
        return checker.run(lines, symmetry_positions, tuple(garbage))
    except GameCheckError:
        raise
    except Exception as exc:  # the game crashed: say where, keep the traceback
        invariant, moves, move = checker.context
        checker.fail(invariant, f"the game raised {type(exc).__name__}: {exc}", moves, move, cause=exc)


def _popcount(x: int) -> int:
    return int(x).bit_count()


def _fields(s: State) -> dict:
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}


class _Checker:
    def __init__(self, game: Game, rng: np.random.Generator, only_mover_wins: bool,
                 cell_actions: bool | None) -> None:
        self.game, self.rng, self.only_mover_wins = game, rng, only_mover_wins
        self.cell_actions = cell_actions
        # what is being checked now, for a crash's message: invariant, moves, move
        self.context: tuple[str, Sequence[int] | None, int | None] = ("protocol", None, None)

    # -- messages ------------------------------------------------------------
    def where(self, moves: Sequence[int] | None, move: int | None = None) -> str:
        if moves is None:
            return ""
        if not moves:
            at = "at the start position"
        else:
            try:
                text = f"{self.game.format_moves(list(moves))!r} = actions "
            except Exception:  # the notation may be what is broken
                text = "actions "
            at = f"at the position after {text}{list(moves)} (ply {len(moves)})"
        if move is not None:
            try:
                at += f", move {self.game.format_action(move)!r} (action {move})"
            except Exception:
                at += f", action {move}"
        return f" ({at})"

    def fail(self, invariant: str, message: str, moves: Sequence[int] | None = None, move: int | None = None,
             *, headline: str = "", cause: BaseException | None = None) -> NoReturn:
        """Raise ``{headline or invariant}: {message} ({where})``."""
        text = f"{headline or invariant}: {message}{self.where(moves, move)}"
        raise GameCheckError(invariant, text, moves) from cause

    def at(self, invariant: str, moves: Sequence[int] | None = None, move: int | None = None) -> None:
        self.context = (invariant, moves, move)

    # -- the run -------------------------------------------------------------
    def run(self, n_lines: int, n_sym: int, garbage: tuple[str, ...]) -> GameReport:
        g = self.game
        self.check_protocol()
        if self.cell_actions is None:
            self.cell_actions = g.num_actions >= g.rows * g.cols
        registered = self.check_registry()
        syms = self.check_symmetry_structure()
        self.check_action_notation(garbage)
        played = [self.play_line() for _ in range(n_lines)]
        for moves, states in played:
            self.check_encode(moves, states)
            self.check_line_notation(moves, states)
        pool = {}
        for moves, states in played:
            for i, s in enumerate(states):
                pool.setdefault(s, moves[:i])
        picked = [(g.initial_state(), []), (played[0][1][-1], played[0][0])]
        keys = list(pool)
        for i in self.rng.permutation(len(keys))[:n_sym]:
            picked.append((keys[i], pool[keys[i]]))
        picked = list({s: m for s, m in picked}.items())
        for s, moves in picked:
            self.check_symmetries(syms, s, moves)
        results = [first_player_result(states[-1]) for _, states in played]
        return GameReport(
            game=g.name, lines=n_lines, positions=len(pool), symmetry_positions=len(picked),
            symmetries=len(syms), longest=max(len(m) for m, _ in played),
            results=(results.count(1.0), results.count(0.0), results.count(-1.0)), registered=registered,
        )

    def check_protocol(self) -> None:
        g = self.game
        self.at("protocol")
        if not isinstance(g, Game):
            members = [*Game.__annotations__, *(n for n in vars(Game) if not n.startswith("_"))]
            self.fail("protocol", f"the game lacks {[m for m in members if not hasattr(g, m)]}")
        if not isinstance(g.name, str) or not g.name:
            self.fail("protocol", f"name must be a non-empty str, got {g.name!r}")
        for attr in ("rows", "cols", "num_actions", "max_moves"):
            v = getattr(g, attr)
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
                self.fail("protocol", f"{attr} must be a positive int, got {v!r}")
        s0 = g.initial_state()
        if not isinstance(s0, State):
            self.fail("protocol", f"initial_state() returned {type(s0).__name__}, not a State", [])
        if (s0.ply, s0.last, s0.outcome) != (0, -1, None):
            self.fail("protocol", f"the start needs ply 0, last -1, outcome None; got {s0}", [])
        if g.initial_state() != s0:
            self.fail("determinism", "two calls of initial_state() differ", [])
        try:
            s0.ply = s0.ply  # type: ignore[misc]  # same value: harmless if it wrongly succeeds
        except dataclasses.FrozenInstanceError:
            pass
        else:
            self.fail("immutability", "a State's fields can be assigned: states must be frozen", [])

    def check_registry(self) -> bool:
        from zeroloop.engine.games import make_game  # the registry imports this module

        g = self.game
        self.at("registry")
        try:
            built = make_game(g.name)
        except ValueError as exc:
            if str(exc).startswith("unknown game"):
                return False
            self.fail("registry", f"make_game({g.name!r}) failed: {exc}", cause=exc)
        same = (built.name, built.rows, built.cols, built.num_actions, built.initial_state())
        if same != (g.name, g.rows, g.cols, g.num_actions, g.initial_state()):
            self.fail("registry", f"make_game({g.name!r}) builds a different game: name, rows, cols, "
                                  f"num_actions or start differ: {same[:4]}")
        return True

    def check_symmetry_structure(self) -> list[Symmetry]:
        g = self.game
        self.at("symmetries")
        hw, n_act = g.rows * g.cols, g.num_actions
        syms = list(g.symmetries())
        if not syms or not all(isinstance(s, Symmetry) for s in syms):
            self.fail("symmetries", "symmetries() must return a non-empty list of Symmetry")
        if (syms[0].name != "identity" or not np.array_equal(syms[0].cell_src, np.arange(hw))
                or not np.array_equal(syms[0].action_src, np.arange(n_act))):
            self.fail("symmetries", "the first symmetry must be the identity, named 'identity'")
        if len({s.name for s in syms}) != len(syms):
            self.fail("symmetries", f"names repeat: {[s.name for s in syms]}")
        for k, sym in enumerate(syms):
            label = f"symmetry {k} ({sym.name})"
            for what, arr, n in (("cell_src", sym.cell_src, hw), ("action_src", sym.action_src, n_act)):
                arr = np.asarray(arr)
                if arr.shape != (n,) or sorted(arr.tolist()) != list(range(n)):
                    self.fail("symmetries", f"{label}: {what} must be a permutation of 0..{n - 1}, got {arr}")
            if self.cell_actions and not np.array_equal(sym.action_src[:hw], sym.cell_src):
                self.fail("symmetries", f"{label}: moves cell actions unlike their cells "
                                        f"(action_src[:H*W] != cell_src)")
            ident = sym.policy(np.arange(n_act))
            for a in range(n_act):
                if ident[sym.action(a)] != a:
                    self.fail("symmetries", f"{label}: action({a}) is not where policy() sends action {a}")
            x = np.arange(2 * NUM_PLANES * hw, dtype=np.float32).reshape(2, NUM_PLANES, g.rows, g.cols)
            if not np.array_equal(sym.planes(x)[1], sym.planes(x[1])):
                self.fail("symmetries", f"{label}: planes() maps a batch unlike one position")
        cell_maps = [tuple(s.cell_src.tolist()) for s in syms]
        if len(set(cell_maps)) != len(syms):
            self.fail("symmetries", "two symmetries have the same cell map")
        action_maps = {tuple(s.action_src.tolist()) for s in syms}
        for a in syms:
            for b in syms:
                if (tuple(a.cell_src[b.cell_src].tolist()) not in set(cell_maps)
                        or tuple(a.action_src[b.action_src].tolist()) not in action_maps):
                    self.fail("symmetries", f"not closed under composition: {a.name} after {b.name} "
                                            f"is not in the list")
        return syms

    def check_action_notation(self, garbage: tuple[str, ...]) -> None:
        g = self.game
        self.at("notation")
        for a in range(g.num_actions):
            text = g.format_action(a)
            if not isinstance(text, str) or not text:
                self.fail("notation", f"format_action({a}) returned {text!r}, not a non-empty str")
            back = g.parse_action(text)
            if back != a:
                self.fail("notation", f"parse_action(format_action({a}) = {text!r}) gave {back!r}, not {a}")
        if g.parse_moves("") != []:
            self.fail("notation", "parse_moves('') must be []")
        for text in garbage:
            for parse in (g.parse_action, g.parse_moves):
                try:
                    got = parse(text)
                except IllegalMoveError as exc:
                    if not str(exc).strip():
                        self.fail("notation", f"{parse.__name__}({text!r}) raised IllegalMoveError "
                                              f"with an empty message")
                    continue
                except Exception as exc:
                    self.fail("notation", f"{parse.__name__}({text!r}) raised {type(exc).__name__}, "
                                          f"not IllegalMoveError: {exc}", cause=exc)
                self.fail("notation", f"{parse.__name__}({text!r}) read garbage as {got!r}; "
                                      f"it must raise IllegalMoveError")

    # -- one random game --------------------------------------------------------
    def play_line(self) -> tuple[list[int], list[State]]:
        g = self.game
        s = g.initial_state()
        moves: list[int] = []
        states = [s]
        while s.outcome is None:
            if len(moves) >= g.max_moves:
                self.fail("termination", f"the game is still running after max_moves = {g.max_moves} plies",
                          moves)
            mask = self.check_running(s, moves)
            a = int(self.rng.choice(np.flatnonzero(mask)))
            s = self.check_apply(s, a, moves)
            moves.append(a)
            states.append(s)
        self.check_finished(s, moves)
        # replayed in reverse, each move gives the same position: no state hides in the game object
        for i in reversed(range(len(moves))):
            self.at("determinism", moves[:i], moves[i])
            try:
                again = g.apply(states[i], moves[i])
            except IllegalMoveError as exc:
                again = exc
            if again != states[i + 1]:
                self.fail("determinism", f"replaying the move gave {again!r}, not the position it gave "
                                         f"before (does the game object keep state?)", moves[:i], moves[i])
        return moves, states

    def check_mask(self, s: State, moves: list[int]) -> np.ndarray:
        g = self.game
        self.at("legal mask", moves)
        mask = g.legal_mask(s)
        if not isinstance(mask, np.ndarray) or mask.shape != (g.num_actions,) or mask.dtype != np.bool_:
            got = f"{mask.dtype} {mask.shape}" if isinstance(mask, np.ndarray) else type(mask).__name__
            self.fail("legal mask", f"legal_mask must be a bool array [{g.num_actions}], got {got}", moves)
        keep = mask.copy()
        mask[:] = ~mask  # the caller owns the array: scribbling on it changes nothing
        again = g.legal_mask(s)
        if np.shares_memory(again, mask) or not np.array_equal(again, keep):
            self.fail("legal mask", "legal_mask returned an array the game keeps using "
                                    "(writing to it changed the next mask)", moves)
        return keep

    def check_running(self, s: State, moves: list[int]) -> np.ndarray:
        g = self.game
        if not isinstance(s, State) or s.ply != len(moves):
            self.fail("apply", f"expected a State with ply {len(moves)}, got {s!r}", moves)
        self.at("outcome", moves)
        if (text := g.describe_outcome(s)) != "game in progress":
            self.fail("outcome", f"describe_outcome of a running game is {text!r}, "
                                 f"not 'game in progress'", moves)
        mask = self.check_mask(s, moves)
        if not mask.any():
            self.fail("legal mask", "a running game (outcome None) has no legal move: a game "
                                    "without moves must be over (or have a pass)", moves)
        illegal = [int(b) for b in self.rng.permutation(np.flatnonzero(~mask))[:3]]
        for b in [*illegal, -1, g.num_actions]:
            self.expect_illegal(s, b, moves, "not legal here" if 0 <= b < g.num_actions else "out of range")
        return mask

    def expect_illegal(self, s: State, a: int, moves: list[int], why: str) -> None:
        self.at("illegal moves", moves, a)
        try:
            self.game.apply(s, a)
        except IllegalMoveError:
            return
        except Exception as exc:
            self.fail("illegal moves", f"apply raised {type(exc).__name__} ({exc}) for an action {why}, "
                                       f"not IllegalMoveError", moves, a, cause=exc)
        self.fail("illegal moves", f"apply accepted action {a}, which is {why}", moves, a)

    def check_apply(self, s: State, a: int, moves: list[int]) -> State:
        self.at("apply", moves, a)
        before = _fields(s)
        t = self.game.apply(s, a)
        if (after := _fields(s)) != before:
            changed = ", ".join(f"{k} {v!r} -> {after[k]!r}" for k, v in before.items() if after[k] != v)
            self.fail("immutability", f"apply mutated its input state: {changed}", moves, a)
        if not isinstance(t, State) or t is s:
            self.fail("apply", f"apply must return a new State, got {t!r}", moves, a)
        if t.ply != s.ply + 1 or t.last != a:
            self.fail("apply", f"the new state needs ply {s.ply + 1} and last {a}, got ply {t.ply}, "
                               f"last {t.last}", moves, a)
        if t.outcome not in (None, *_RESULT_TEXT):
            self.fail("outcome", f"outcome must be None, 1, 0 or -1, got {t.outcome!r}", moves, a)
        return t

    def check_finished(self, s: State, moves: list[int]) -> None:
        g = self.game
        self.at("outcome", moves)
        if s.outcome > 0 and self.only_mover_wins:
            self.fail("outcome", "the side to move won by its opponent's move, which only_mover_wins rules "
                                 "out: is the sign flipped? outcome is from the side to move (-1: the "
                                 "player who just moved won)", moves)
        expected = _RESULT_TEXT[first_player_result(s)]
        if (text := g.describe_outcome(s)) != expected:
            self.fail("outcome", f"describe_outcome is {text!r}, but outcome {s.outcome} at ply {s.ply} "
                                 f"means {expected!r}", moves)
        self.at("render", moves)
        if not isinstance(board := g.render(s), str) or expected not in board:
            self.fail("render", f"render of a finished game must state the result {expected!r}:\n{board}",
                      moves)
        mask = self.check_mask(s, moves)
        if mask.any():
            self.fail("legal mask", f"a finished game has legal moves {np.flatnonzero(mask).tolist()}", moves)
        for a in range(g.num_actions):
            self.expect_illegal(s, a, moves, "played after the end")

    # -- encode, notation and symmetries over a finished game ------------------------
    def check_encode(self, moves: list[int], states: list[State]) -> None:
        g = self.game
        self.at("encode", moves)
        for batch, at in ((states[:1], []), (states, moves)):  # the start alone first: the clearer message
            shape = (len(batch), input_planes(g), g.rows, g.cols)
            x = g.encode(batch)
            if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.shape != shape:
                got = f"{x.dtype} {x.shape}" if isinstance(x, np.ndarray) else type(x).__name__
                self.fail("encode", f"encode of {len(batch)} position(s) must give float32 planes "
                                    f"[B, P, H, W] = {shape}, got {got}", at)
        for i in (0, len(states) // 2, len(states) - 1):
            one = g.encode([states[i]])
            if not np.array_equal(one[0], x[i]):
                self.fail("encode", "a position encodes differently alone than in a batch", moves[:i])
            s = states[i]
            twin = dataclasses.replace(s, ply=s.ply + 2, outcome=0.0 if s.outcome is None else None)
            if not np.array_equal(g.encode([twin])[0], x[i]):
                self.fail("encode", "encode must read only me, opp, last, the side to move (ply % 2) and "
                                    "the state's planes_key: the evaluators cache answers by these "
                                    "(nn.position_key)", moves[:i])
        one[:] = 7.0  # the caller owns the array: scribbling on it changes nothing
        again = g.encode([states[-1]])
        if np.shares_memory(again, one) or not np.array_equal(again[0], x[-1]):
            self.fail("encode", "encode returned an array the game keeps using", moves)
        for i, (s, p) in enumerate(zip(states, x)):
            at = moves[:i]
            if not (np.isin(p[:3], (0.0, 1.0)).all()):
                self.fail("encode", "planes 0-2 (stones, last move) must hold only 0 and 1", at)
            if (p[0] * p[1]).any():
                self.fail("encode", "planes 0 and 1 have a stone on the same cell", at)
            if (int(p[0].sum()), int(p[1].sum())) != (_popcount(s.me), _popcount(s.opp)):
                self.fail("encode", f"planes 0 and 1 hold {int(p[0].sum())} and {int(p[1].sum())} stones, "
                                    f"the bitboards me and opp {_popcount(s.me)} and {_popcount(s.opp)}", at)
            if not (p[3] == (1.0 if s.ply % 2 == 0 else 0.0)).all():
                self.fail("encode", "plane 3 must be all ones when the first player is to move "
                                    "(ply even), else all zeros", at)
            marked = np.flatnonzero(p[2].reshape(-1))
            if i == 0 or (s.me, s.opp) == (states[i - 1].opp, states[i - 1].me):
                if marked.size:
                    self.fail("encode", "plane 2 (last move) must be empty at the start and after a pass", at)
                continue
            a, before = moves[i - 1], x[i - 1]
            if marked.size != 1:
                self.fail("encode", f"plane 2 (last move) must mark one cell, marks {marked.size}", at)
            cell = int(marked[0])
            if p[1].reshape(-1)[cell] != 1 or before[0].reshape(-1)[cell] != 0:
                self.fail("encode", f"plane 2 marks cell {cell}, not a stone the last move placed", at)
            if self.cell_actions and a < g.rows * g.cols and cell != a:
                self.fail("encode", f"plane 2 marks cell {cell}, but the last move was on cell {a}", at)

    def check_line_notation(self, moves: list[int], states: list[State]) -> None:
        g = self.game
        self.at("notation", moves)
        text = g.format_moves(moves)
        if not isinstance(text, str) or g.parse_moves(text) != moves:
            self.fail("notation", f"parse_moves(format_moves(moves) = {text!r}) does not give the moves back",
                      moves)
        s = g.initial_state()
        for a in g.parse_moves(text):
            s = g.apply(s, a)
        if s != states[-1]:
            self.fail("notation", f"replaying {text!r} from the start gives another position", moves)

    def check_symmetries(self, syms: list[Symmetry], s: State, moves: list[int]) -> None:
        g = self.game
        self.at("render", moves)
        board = g.render(s)
        if not isinstance(board, str) or not board.strip():
            self.fail("render", f"render must return the board as text, got {board!r}", moves)
        self.at("symmetry", moves)
        x, mask = g.encode([s])[0], g.legal_mask(s)
        children = {int(a): g.apply(s, int(a)) for a in np.flatnonzero(mask)}
        if g.transform(s, syms[0]) != s:
            self.fail("symmetry", "the identity symmetry changes the position", moves)
        for k, sym in enumerate(syms):
            label = f"symmetry {k} ({sym.name})"
            t = g.transform(s, sym)
            if not isinstance(t, State) or (t.ply, t.outcome) != (s.ply, s.outcome) or (
                    (_popcount(t.me), _popcount(t.opp)) != (_popcount(s.me), _popcount(s.opp))):
                self.fail("symmetry", f"transform must keep ply, outcome and stone counts; {s} became {t}",
                          moves, headline=label)
            if not np.array_equal(g.encode([t])[0], sym.planes(x)):
                planes = [j for j in range(input_planes(g)) if not np.array_equal(g.encode([t])[0][j],
                                                                              sym.planes(x)[j])]
                self.fail("symmetry", f"encode(transform(s)) != sym.planes(encode(s)) on planes {planes}",
                          moves, headline=f"{label} does not commute with encode")
            if not np.array_equal(g.legal_mask(t), sym.policy(mask)):
                self.fail("symmetry", "legal_mask(transform(s)) != sym.policy(legal_mask(s))", moves,
                          headline=f"{label} does not commute with legal_mask")
            for a, child in children.items():
                self.at("symmetry", moves, a)
                moved, image = g.apply(t, sym.action(a)), g.transform(child, sym)
                if moved != image:
                    self.fail("symmetry", f"apply(transform(s), sym.action(a)) = {moved} but "
                                          f"transform(apply(s, a)) = {image}", moves, a,
                              headline=f"{label} does not commute with apply")
