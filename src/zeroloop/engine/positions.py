"""Measuring strength: solver-labelled test positions and the move error rate
against perfect play.

A position set is built by random play and labelled by a perfect player: for
every legal move, whether it wins, draws or loses with best play. A move is an
error when its result is worse than the best move's; distance to the end is
not counted, so a slower win is not an error.

Two kinds of set:

* :func:`make_position_set`: positions where the choice matters (not every
  legal move has the same result), one group (tic-tac-toe, tuning);
* :func:`make_connect4_benchmark`: Connect Four positions in Pascal Pons'
  six benchmark groups (:data:`PONS_GROUPS`), a fixed number per group, every
  position as random play gives it (as in Pons' test sets, which AlphaZero.jl
  reports its Connect Four errors on), including those where every move has
  the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from zeroloop.engine.games import Game, State, random_line

#: result class of an illegal move in a label row
ILLEGAL = -9


#: Pascal Pons' Connect Four benchmark groups (blog.gamesolver.org, "Part 2 -
#: Benchmarking solvers"): name, Pons' test file, the stones on the board and
#: the moves left before the end of the game under perfect play (both ranges
#: inclusive). Every position falls into exactly one group.
PONS_GROUPS: tuple[tuple[str, str, tuple[int, int], tuple[int, int]], ...] = (
    ("begin-easy", "Test_L1_R1", (0, 14), (0, 13)),
    ("begin-medium", "Test_L1_R2", (0, 14), (14, 27)),
    ("begin-hard", "Test_L1_R3", (0, 14), (28, 42)),
    ("middle-easy", "Test_L2_R1", (15, 28), (0, 13)),
    ("middle-medium", "Test_L2_R2", (15, 28), (14, 27)),
    ("end-easy", "Test_L3_R1", (29, 42), (0, 13)),
)
PONS_GROUP_NAMES = tuple(g[0] for g in PONS_GROUPS)


def moves_left(score: int, stones: int, cells: int = 42) -> int:
    """Moves until the end of the game under perfect play, from a position's
    score in Pons' convention (for the side to move: ``22 - the winner's
    stones at the end`` when it wins, the negative when it loses, 0 for a
    draw, which ends with the board full; ``22 = cells / 2 + 1``)."""
    if score == 0:
        return cells - stones
    winner_stones = cells // 2 + 1 - abs(score)
    mover_is_first = stones % 2 == 0
    winner_is_first = mover_is_first if score > 0 else not mover_is_first
    last_move = 2 * winner_stones - 1 if winner_is_first else 2 * winner_stones
    return last_move - stones


def pons_group(stones: int, left: int) -> str:
    """The Pons group of a position with ``stones`` on the board and ``left``
    moves to the end under perfect play."""
    for name, _, (s0, s1), (l0, l1) in PONS_GROUPS:
        if s0 <= stones <= s1 and l0 <= left <= l1:
            return name
    raise ValueError(f"no Pons group has {stones} stones and {left} moves left")


@dataclass
class PositionSet:
    """``moves[i]`` reaches position i from the start; ``labels[i, a]`` is +1
    (win), 0 (draw), -1 (loss) for the side to move after playing a, or
    ``ILLEGAL``. ``labels`` is ``[N, A]`` int8. ``groups[i]`` names position
    i's group (``"all"`` for an ungrouped set)."""

    game: str
    moves: list[list[int]]
    labels: np.ndarray
    groups: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.groups:
            self.groups = ["all"] * len(self.moves)
        if not len(self.groups) == len(self.moves) == len(self.labels):
            raise ValueError(f"{len(self.moves)} positions, {len(self.labels)} label rows and "
                             f"{len(self.groups)} groups: they must be as many")

    def group_names(self) -> list[str]:
        """The groups in the order they first appear."""
        return list(dict.fromkeys(self.groups))

    def subset(self, rows: Sequence[int]) -> PositionSet:
        return PositionSet(self.game, [self.moves[i] for i in rows], self.labels[list(rows)],
                           [self.groups[i] for i in rows])

    def states(self, game: Game) -> list[State]:
        out = []
        for seq in self.moves:
            s = game.initial_state()
            for a in seq:
                s = game.apply(s, a)
            out.append(s)
        return out

    def to_json(self) -> dict:
        return {"game": self.game, "moves": self.moves, "labels": self.labels.tolist(), "groups": self.groups}

    @classmethod
    def from_json(cls, data: dict) -> PositionSet:
        rows = data["labels"]
        # an empty set (a game with no perfect player) has no rows to take a width from
        labels = np.asarray(rows, np.int8).reshape(len(rows), -1) if rows else np.zeros((0, 0), np.int8)
        return cls(data["game"], [list(m) for m in data["moves"]], labels, list(data.get("groups", [])))


def position_keys(game: Game, positions: PositionSet) -> set[tuple[int, int]]:
    """The positions of a set as ``(me, opp)`` bitboards, for keeping another set apart from it."""
    return {(s.me, s.opp) for s in positions.states(game)}


def make_position_set(game: Game, count: int, rng: np.random.Generator,
                      scorer: Callable[[State], dict[int, int]], max_tries: int = 50,
                      exclude: set[tuple[int, int]] = frozenset()) -> PositionSet:
    """``count`` distinct positions from random play where the move choice matters,
    none of them in ``exclude`` (``(me, opp)`` keys, :func:`position_keys`)."""
    seen: set[tuple[int, int, int]] = set()
    moves_out, labels_out = [], []
    tries = 0
    while len(moves_out) < count and tries < count * max_tries:
        tries += 1
        s, seq = random_line(game, int(rng.integers(0, game.max_moves)), rng)
        key = (s.me, s.opp, s.ply)
        if key in seen or key[:2] in exclude:
            continue
        seen.add(key)
        row = _label_row(game, scorer(s))
        legal_vals = row[row != ILLEGAL]
        if legal_vals.min() == legal_vals.max():
            continue  # every move is as good as any other
        moves_out.append(seq)
        labels_out.append(row)
    labels = np.stack(labels_out) if labels_out else np.zeros((0, game.num_actions), np.int8)
    return PositionSet(game.name, moves_out, labels)


#: Othello endgame groups: (name, fewest, most empty squares)
OTHELLO_GROUPS = (("empties-1-7", 1, 7), ("empties-8-14", 8, 14))


def make_othello_endgame_set(game: Game, per_group: int, rng: np.random.Generator,
                             scorer: Callable[[State], dict[int, int]], max_tries: int = 400,
                             exclude: set[tuple[int, int]] = frozenset()) -> PositionSet:
    """``per_group`` distinct Othello positions from random play in each of
    :data:`OTHELLO_GROUPS` (by empty squares, at most 14: what the exact
    endgame solver labels), each where the move choice matters (not every
    legal move has the same result), none in ``exclude``. A RuntimeError
    names the groups left short after ``per_group * max_tries`` tries."""
    if not game.name.startswith("othello"):
        raise ValueError(f"Othello endgame positions are for Othello, not {game.name}")
    cells = game.rows * game.cols
    need = {name: per_group for name, _, _ in OTHELLO_GROUPS}
    seen: set[tuple[int, int]] = set(exclude)
    rows: dict[str, list[tuple[list[int], np.ndarray]]] = {name: [] for name, _, _ in OTHELLO_GROUPS}
    for _ in range(per_group * max_tries * len(OTHELLO_GROUPS)):
        open_groups = [(g, lo, hi) for g, lo, hi in OTHELLO_GROUPS if need[g]]
        if not open_groups:
            break
        most = max(hi for _, _, hi in open_groups)
        # a random line long enough to leave at most `most` empty squares (passes make some longer)
        s, seq = random_line(game, int(rng.integers(cells - 4 - most, game.max_moves)), rng)
        empties = cells - (s.me | s.opp).bit_count()
        group = next((g for g, lo, hi in open_groups if lo <= empties <= hi), None)
        if group is None or (s.me, s.opp) in seen:
            continue
        seen.add((s.me, s.opp))
        row = _label_row(game, scorer(s))
        legal_vals = row[row != ILLEGAL]
        if legal_vals.min() == legal_vals.max():
            continue  # every move is as good as any other
        need[group] -= 1
        rows[group].append((seq, row))
    short = {g: n for g, n in need.items() if n}
    if short:
        raise RuntimeError(f"random play gave too few positions for the groups {short} (missing per group)")
    flat = [(g, seq, row) for g, _, _ in OTHELLO_GROUPS for seq, row in rows[g]]
    return PositionSet(game.name, [seq for _, seq, _ in flat], np.stack([row for _, _, row in flat]),
                       [g for g, _, _ in flat])


def make_benchmark(game: Game, per_group: int, rng: np.random.Generator,
                   scorer: Callable[[State], dict[int, int]],
                   exclude: set[tuple[int, int]] = frozenset(),
                   value: Callable[[State], int] | None = None) -> PositionSet:
    """The position set a game is measured on: Connect Four in Pons' six
    groups, Othello endgames in two groups by empty squares, any other game
    (tic-tac-toe) in one group of positions where the choice matters.
    ``value`` (Connect Four): see :func:`make_connect4_benchmark`."""
    if game.name == "connect4":
        return make_connect4_benchmark(game, per_group, rng, scorer, exclude=exclude, value=value)
    if game.name.startswith("othello"):
        return make_othello_endgame_set(game, per_group, rng, scorer, exclude=exclude)
    return make_position_set(game, per_group, rng, scorer, exclude=exclude)


def _label_row(game: Game, scores: dict[int, int]) -> np.ndarray:
    row = np.full(game.num_actions, ILLEGAL, np.int8)
    for a, v in scores.items():
        row[a] = np.sign(v)
    return row


def make_connect4_benchmark(game: Game, per_group: int, rng: np.random.Generator,
                            scorer: Callable[[State], dict[int, int]], max_tries: int = 400,
                            exclude: set[tuple[int, int]] = frozenset(),
                            value: Callable[[State], int] | None = None) -> PositionSet:
    """``per_group`` distinct positions from random play in each of Pons' six
    groups, grouped by the stones on the board and the moves left under
    perfect play (from ``scorer``'s Pons-convention scores). The number of
    stones is drawn uniformly over the groups that still need positions; a
    RuntimeError names the groups left short after ``per_group * max_tries``
    tries (it does not happen at the sizes used here). Positions in ``exclude``
    (``(me, opp)`` keys, :func:`position_keys`) are never drawn.

    ``value`` (:func:`~zeroloop.engine.perfect.perfect_value`), the best of
    ``scorer``'s scores found without scoring every move, places a draw in its
    group first: most draws land in a group already full (about 3 in 4 for
    the default sets), and only the others are scored move by move. The set
    is the same either way."""
    if game.name != "connect4":
        raise ValueError(f"Pons' benchmark groups are for connect4, not {game.name}")
    need = dict.fromkeys(PONS_GROUP_NAMES, per_group)
    spans = {name: stones for name, _, stones, _ in PONS_GROUPS}
    seen: set[tuple[int, int]] = set(exclude)
    rows: dict[str, list[tuple[list[int], np.ndarray]]] = {name: [] for name in PONS_GROUP_NAMES}
    for _ in range(per_group * max_tries):
        open_groups = [g for g, n in need.items() if n]
        if not open_groups:
            break
        plies = sorted({k for g in open_groups for k in range(spans[g][0], spans[g][1] + 1)})
        s, seq = random_line(game, plies[int(rng.integers(len(plies)))], rng)
        if (s.me, s.opp) in seen:
            continue
        seen.add((s.me, s.opp))
        best = None
        if value is not None:
            best = value(s)
            if not need[pons_group(s.ply, moves_left(best, s.ply, game.rows * game.cols))]:
                continue
        scores = scorer(s)
        if best is not None and best != max(scores.values()):
            raise RuntimeError(f"the solver's value of the position after {seq} ({best}) is not its best "
                               f"move's score ({max(scores.values())})")
        group = pons_group(s.ply, moves_left(max(scores.values()), s.ply, game.rows * game.cols))
        if need[group]:
            need[group] -= 1
            rows[group].append((seq, _label_row(game, scores)))
    short = {g: n for g, n in need.items() if n}
    if short:
        raise RuntimeError(f"random play gave too few positions for the groups {short} (missing per group)")
    flat = [(g, seq, row) for g in PONS_GROUP_NAMES for seq, row in rows[g]]
    return PositionSet(game.name, [seq for _, seq, _ in flat], np.stack([row for _, _, row in flat]),
                       [g for g, _, _ in flat])


@dataclass(frozen=True)
class ErrorRate:
    errors: int
    positions: int

    @property
    def rate(self) -> float:
        return self.errors / self.positions if self.positions else float("nan")

    def interval(self, z: float = 1.959964) -> tuple[float, float]:
        """Wilson score interval of the error rate (95% by default); (0, 1) with no positions."""
        n = self.positions
        if n == 0:
            return (0.0, 1.0)
        p = self.errors / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return (max(0.0, float(centre - half)), min(1.0, float(centre + half)))


def move_mistakes(positions: PositionSet, chosen: Sequence[int]) -> np.ndarray:
    """``[N]`` bool: whether each of ``chosen`` (one move per position) gives
    away a result, i.e. another legal move has a strictly better one.
    An illegal choice is refused."""
    best = positions.labels.max(axis=1)
    got = positions.labels[np.arange(len(chosen)), np.asarray(chosen, int)]
    if np.any(got == ILLEGAL):
        raise ValueError("an illegal move was chosen for a test position")
    return got < best


def paired_errors(first: Sequence[bool], second: Sequence[bool], z: float = 1.959964) -> dict:
    """Two players' mistakes on the same positions, compared position by
    position: how many only the first / only the second got wrong, the
    difference of their error rates (second minus first) with a normal
    interval from the per-position differences, and McNemar's exact
    two-sided p-value (the discordant positions, binomial with p = 1/2).
    Pairing removes the positions' own difficulty, so it separates two
    models that unpaired intervals cannot."""
    a, b = np.asarray(first, bool), np.asarray(second, bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired errors need two equal-length rows, got {a.shape} and {b.shape}")
    n = len(a)
    only_first, only_second = int((a & ~b).sum()), int((b & ~a).sum())
    d = b.astype(float) - a.astype(float)
    diff = float(d.mean()) if n else float("nan")
    half = z * float(d.std(ddof=1)) / np.sqrt(n) if n > 1 else float("inf")
    k, m = min(only_first, only_second), only_first + only_second
    p = min(1.0, 2.0 * sum(math.comb(m, i) for i in range(k + 1)) / 2.0 ** m) if m else 1.0
    return {"positions": n, "only_first": only_first, "only_second": only_second,
            "difference": round(diff, 4), "difference_ci95": [round(diff - half, 4), round(diff + half, 4)],
            "mcnemar_p": round(p, 4)}


def move_errors(positions: PositionSet, chosen: Sequence[int]) -> ErrorRate:
    """How many of ``chosen`` (one move per position) give away a result."""
    return ErrorRate(int(move_mistakes(positions, chosen).sum()), len(chosen))


def group_errors(positions: PositionSet, chosen: Sequence[int]) -> dict[str, ErrorRate]:
    """:func:`move_errors` per group, in the set's group order."""
    chosen = np.asarray(chosen, int)
    groups = np.asarray(positions.groups)
    return {g: move_errors(positions.subset(np.flatnonzero(groups == g).tolist()), chosen[groups == g])
            for g in positions.group_names()}


def decisive(positions: PositionSet) -> np.ndarray:
    """Per position: whether the choice matters (not every legal move has the same result)."""
    legal = positions.labels != ILLEGAL
    hi = np.where(legal, positions.labels, -2).max(axis=1)
    lo = np.where(legal, positions.labels, 2).min(axis=1)
    return hi > lo
