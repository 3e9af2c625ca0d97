"""Go on small square boards (``go-7``, ``go-9``, ``go-NxN``), Tromp-Taylor rules.

* Stones with no liberty are captured: after a move, the opponent's groups
  without a liberty are removed first, then the mover's own; a move that
  would leave its own group without a liberty (suicide) is illegal.
* Positional superko: a move may not recreate a board position (the stones
  alone, whoever is to move) that occurred earlier in the game, which covers
  simple ko.
* ``pass`` is an action (index ``size * size``, the last one), always legal.
  Two passes in a row end the game; so does reaching :attr:`Go.max_moves`
  plies (three times the cells), after which the position is scored as it
  stands.
* Area scoring: a player's stones plus the empty points from which only
  that player's stones can be reached; White gets ``komi`` on top. Black
  (X) moves first. Default komi: 9 on 7x7 (its known fair value: perfect
  play wins by 9 for Black, so 9 makes it a draw) and 7.5 elsewhere.

Moves are written as GTP writes them: a column letter (``I`` skipped) and a
row number counted from the bottom (``D4``, ``C7``), and ``pass``.

On boards up to 10x10 the rules run as numba kernels over cell arrays
(:mod:`~zeroloop.engine.games.go_kernels`; superko by Zobrist keys, a key
already seen checked against the boards); larger boards, and states built
without keys, take the same rules in Python. A test holds the two equal.

A :class:`GoState` carries, beyond the shared fields, the consecutive passes,
every earlier board (for superko) with its Zobrist key, and the last few
boards. The network sees the usual four planes (own stones, the opponent's,
the last move, the colour); for each of the :data:`HISTORY` positions before
the last moves, the mover's and the opponent's stones there; then the
:data:`FEATURES`: each side's stones by their chain's liberties (1, 2, 3+)
and the point a ko forbids retaking at once: 17 planes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from zeroloop.engine.games import go_kernels
from zeroloop.engine.games.base import IllegalMoveError, State, Symmetry
from zeroloop.engine.games.bitboard import BitboardGame
from zeroloop.engine.games.go_kernels import words
from zeroloop.engine.games.text import TokenNotation

#: GTP's column letters: A-Z without I
COLUMNS = "ABCDEFGHJKLMNOPQRSTUVWXYZ"
#: earlier positions the network sees besides the current one
HISTORY = 3
#: planes after the history ones: each side's stones by liberties (1, 2, 3+), and the ko point
FEATURES = 7
_TOKEN = re.compile(r"\s*(pass|[a-hj-zA-HJ-Z]\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class GoState(State):
    """A Go position: ``passes`` in a row just played, ``seen``, every
    board of the game so far as ``(black, white)`` bitboards (this one
    included), which positional superko forbids repeating, ``recent``,
    the boards before the last :data:`HISTORY` moves, for the input planes,
    and ``keys``, the Zobrist keys of ``seen``'s boards, which let the legal
    moves look a board up by its key."""

    passes: int = 0
    seen: frozenset = frozenset()
    recent: tuple = ()  # (black, white) before each of the last HISTORY moves, the latest first
    keys: frozenset = frozenset()  # Zobrist keys of seen's boards (empty: not kept, the rules read seen)

    @property
    def planes_key(self) -> tuple:
        """What the history planes are made of (the evaluators' cache key)."""
        return self.recent


def default_komi(size: int) -> float:
    return 9.0 if size == 7 else 7.5


class Go(TokenNotation, BitboardGame):
    _token = _TOKEN

    def __init__(self, size: int = 9, komi: float | None = None) -> None:
        if not 2 <= size <= 19:
            raise ValueError(f"go board size {size}: must be 2-19")
        self.rows = self.cols = self.size = size
        self.komi = default_komi(size) if komi is None else float(komi)
        self.name = f"go-{size}" if komi is None or self.komi == default_komi(size) else \
            f"go-{size}-komi{self.komi:g}"
        self.pass_action = size * size
        self.num_actions = size * size + 1
        self.num_planes = 4 + 2 * HISTORY + FEATURES
        self.max_moves = 3 * size * size
        self.stride = size + 1  # a padding bit per row: no shift wraps round
        self._setup_bits()
        # the kernels' tables, where the padded board fits their two words
        self._kernel = int(self.bit_of_cell.max()) < go_kernels.MAX_BITS
        self._nbr = self._neighbours()
        self._zob = go_kernels.zobrist_table(size * size)
        self._start = GoState(0, 0, seen=frozenset({(0, 0)}), keys=frozenset({0} if self._kernel else ()))

    def initial_state(self) -> GoState:
        return self._start

    # -- stones -----------------------------------------------------------
    def _neighbours(self) -> np.ndarray:
        """``[cells, 4]`` int64: each point's neighbours, -1 off the board."""
        n = self.size
        out = np.full((n * n, 4), -1, np.int64)
        for i in range(n * n):
            r, c = divmod(i, n)
            for k, (dr, dc) in enumerate(((-1, 0), (1, 0), (0, -1), (0, 1))):
                if 0 <= r + dr < n and 0 <= c + dc < n:
                    out[i, k] = (r + dr) * n + c + dc
        return out

    def _key(self, black: int, white: int) -> int:
        """The Zobrist key of a board (:mod:`~zeroloop.engine.games.go_kernels`)."""
        return int(go_kernels.board_key(*words(black), *words(white), self.bit_of_cell, self._zob))

    def _around(self, x: int) -> int:
        """The cells next to the stones of ``x``, on the board."""
        s = self.stride
        return ((x << 1) | (x >> 1) | (x << s) | (x >> s)) & self.board_bits

    def group(self, stone: int, stones: int) -> int:
        """The chain of ``stones`` connected to the bit ``stone``."""
        g, frontier = stone, stone
        while frontier:
            frontier = self._around(frontier) & stones & ~g
            g |= frontier
        return g

    def _play_stone(self, me: int, opp: int, bit: int) -> tuple[int, int] | None:
        """The boards (mover, opponent) after the mover plays ``bit`` on an
        empty point, with captures; None when it is suicide."""
        me |= bit
        empty = self.board_bits & ~(me | opp)
        touching = self._around(bit) & opp
        while touching:
            stone = touching & -touching
            g = self.group(stone, opp)
            touching &= ~g
            if not self._around(g) & empty:
                opp &= ~g
                empty |= g
        if not self._around(self.group(bit, me)) & empty:
            return None
        return me, opp

    def _boards(self, state: State, me: int, opp: int) -> tuple[int, int]:
        """(black, white) for the mover's and the opponent's stones."""
        return (me, opp) if state.ply % 2 == 0 else (opp, me)

    def _legal_point(self, state: GoState, a: int) -> tuple[int, int] | None:
        bit = self.cell_bits[a]
        if (state.me | state.opp) & bit:
            return None
        after = self._play_stone(state.me, state.opp, bit)
        if after is None or self._boards(state, *after) in state.seen:
            return None
        return after

    def legal_mask(self, state: State) -> np.ndarray:
        mask = np.zeros(self.num_actions, dtype=bool)
        if state.outcome is not None:
            return mask
        if state.keys:
            return self._legal_by_kernel(state, mask)
        return self._legal_by_chains(state, mask)

    def _legal_by_kernel(self, state: GoState, mask: np.ndarray) -> np.ndarray:
        """The legal moves from :func:`~zeroloop.engine.games.go_kernels.legal_points`,
        superko by the keys: a point whose board-after key was seen is checked
        against the boards (a repetition, or a key collision)."""
        after = np.empty(self.pass_action, np.int64)
        k = go_kernels.legal_points(*words(state.me), *words(state.opp), state.ply % 2 == 0, self.bit_of_cell,
                                    self._nbr, self._zob, mask, after)
        if not state.keys.isdisjoint(after[:k].tolist()):  # a repetition (or a key collision): by the boards
            for a in np.flatnonzero(mask[:self.pass_action]).tolist():
                mask[a] = self._legal_point(state, a) is not None
        return mask

    def _legal_by_chains(self, state: GoState, mask: np.ndarray) -> np.ndarray:
        """The legal moves in Python, for boards the kernels do not take and
        states without keys."""
        # one pass over the chains instead of a capture search per point: the opponent's chains in
        # atari (by their one liberty) and the points next to an own chain with another liberty
        me, opp, seen = state.me, state.opp, state.seen
        empty = self.board_bits & ~(me | opp)
        atari: dict[int, int] = {}
        own_safe = 0
        for stones, theirs in ((opp, True), (me, False)):
            rest = stones
            while rest:
                g = self.group(rest & -rest, stones)
                rest &= ~g
                libs = self._around(g) & empty
                if theirs:
                    if not libs & (libs - 1):
                        atari[libs] = atari.get(libs, 0) | g
                elif libs & (libs - 1):
                    own_safe |= libs
        black_moves = state.ply % 2 == 0
        bits = self.cell_bits
        for a in np.flatnonzero(self.bits_to_cells([empty])[0]).tolist():
            b = bits[a]
            captured = atari.get(b, 0)
            if not (captured or self._around(b) & empty or b & own_safe):
                continue  # suicide: no liberty, no capture, and every chain it joins has only this one
            board = (me | b, opp & ~captured) if black_moves else (opp & ~captured, me | b)
            mask[a] = board not in seen
        mask[self.pass_action] = True
        return mask

    def apply(self, state: State, action: int) -> GoState:
        self._check_action(state, action)
        ply = state.ply + 1
        recent = (self._boards(state, state.me, state.opp), *state.recent[:HISTORY - 1])
        if action == self.pass_action:
            passes = state.passes + 1
            nxt = GoState(state.opp, state.me, ply, action, None, passes, state.seen, recent, state.keys)
        else:
            after = self._played(state, action)
            if after is None:
                raise IllegalMoveError(self._why_illegal(state, action))
            me, opp, board, key = after
            keys = state.keys | {key} if state.keys else state.keys
            nxt = GoState(opp, me, ply, action, None, 0, state.seen | {board}, recent, keys)
        if nxt.passes >= 2 or ply >= self.max_moves:
            diff = self.score(nxt)  # Black's lead
            black_to_move = ply % 2 == 0
            outcome = float(np.sign(diff if black_to_move else -diff))
            nxt = GoState(nxt.me, nxt.opp, ply, action, outcome, nxt.passes, nxt.seen, recent, nxt.keys)
        return nxt

    def _played(self, state: GoState, action: int) -> tuple[int, int, tuple[int, int], int | None] | None:
        """The mover's stones and the opponent's after playing the point
        ``action``, the board as ``(black, white)`` and its key (None where
        the state keeps no keys); None when the move is illegal."""
        if (state.me | state.opp) & self.cell_bits[action]:
            return None
        if state.keys:
            ok, me0, me1, opp0, opp1, key = go_kernels.play_point(
                *words(state.me), *words(state.opp), state.ply % 2 == 0, action, self.bit_of_cell, self._nbr,
                self._zob)
            if not ok:
                return None
            me, opp = me0 | (me1 << go_kernels.WORD_BITS), opp0 | (opp1 << go_kernels.WORD_BITS)
        else:
            after = self._play_stone(state.me, state.opp, self.cell_bits[action])
            if after is None:
                return None
            (me, opp), key = after, None
        board = self._boards(state, me, opp)
        return None if board in state.seen else (me, opp, board, key)

    def _why_illegal(self, state: State, action: int) -> str:
        where = self.format_action(action)
        bit = self.cell_bits[action]
        if (state.me | state.opp) & bit:
            return f"{where} is occupied"
        if self._play_stone(state.me, state.opp, bit) is None:
            return f"{where} is suicide (the stone's group would have no liberty)"
        return f"{where} repeats an earlier position (superko)"

    # -- scoring ----------------------------------------------------------
    def area(self, black: int, white: int) -> tuple[int, int]:
        """Tromp-Taylor area: each side's stones plus the empty points that
        reach only its stones."""
        if self._kernel:
            return go_kernels.area(*words(black), *words(white), self.bit_of_cell, self._nbr)
        b_own, w_own = self.owned(black, white)
        return b_own.bit_count(), w_own.bit_count()

    def owned(self, black: int, white: int) -> tuple[int, int]:
        """Each side's Tromp-Taylor area as bitboards: its stones and the empty
        regions that reach only its stones (:meth:`area` counts them)."""
        empty = self.board_bits & ~(black | white)
        b_own, w_own = black, white
        while empty:
            region = self.group(empty & -empty, empty)
            empty &= ~region
            edge = self._around(region)
            if edge & black and not edge & white:
                b_own |= region
            elif edge & white and not edge & black:
                w_own |= region
        return b_own, w_own

    def score(self, state: State) -> float:
        """Black's area minus White's, minus komi: positive when Black leads."""
        b, w = self.area(*self._boards(state, state.me, state.opp))
        return b - w - self.komi

    # -- symmetries -------------------------------------------------------
    def symmetries(self) -> list[Symmetry]:
        return self._dihedral(["identity", "flip_lr", "flip_ud", "rot180",
                               "transpose", "rot90", "rot270", "anti_transpose"])

    def _map_board(self, bits: int, sym: Symmetry) -> int:
        return self.cells_to_bits(self.bits_to_cells([bits])[0][sym.cell_src])

    def transform(self, state: State, sym: Symmetry) -> GoState:
        last = sym.action(state.last) if state.last >= 0 else -1
        seen = frozenset((self._map_board(b, sym), self._map_board(w, sym)) for b, w in state.seen)
        recent = tuple((self._map_board(b, sym), self._map_board(w, sym)) for b, w in state.recent)
        keys = frozenset(self._key(b, w) for b, w in seen) if state.keys else state.keys
        return GoState(self._map_board(state.me, sym), self._map_board(state.opp, sym), state.ply, last,
                       state.outcome, state.passes, seen, recent, keys)

    # -- input planes -------------------------------------------------------
    def encode(self, states: Sequence[State]) -> np.ndarray:
        """The four shared planes, then for each of the :data:`HISTORY` positions
        before the last moves (the latest first) the mover's stones and the
        opponent's there (empty before the game's start): captures and ko show
        as what changed; then the :data:`FEATURES`: the mover's stones in
        chains of 1, 2 and 3+ liberties, the opponent's likewise, and the ko
        point (:meth:`_ko_point`)."""
        n = len(states)
        out = np.zeros((n, self.num_planes, self.rows, self.cols), np.float32)
        out[:, :4] = super().encode(states)
        boards, where = [], []
        for i, s in enumerate(states):
            black_moves = s.ply % 2 == 0
            for k, (b, w) in enumerate(s.recent):
                boards += [b, w] if black_moves else [w, b]
                where.append((i, 4 + 2 * k))
        if boards:
            occ = self.bits_to_cells(boards).reshape(len(where), 2, self.rows, self.cols)
            for (i, p), pair in zip(where, occ, strict=True):
                out[i, p:p + 2] = pair
        first = 4 + 2 * HISTORY
        for i, s in enumerate(states):
            planes = out[i, first:].reshape(FEATURES, -1)
            last, ko = self.last_cell(s), self._ko_point(s)
            if self._kernel:
                go_kernels.liberty_planes(*words(s.me), *words(s.opp), last, ko, self.bit_of_cell, self._nbr,
                                          planes)
            else:
                self._liberty_planes(s, last, ko, planes)
        return out

    def _ko_point(self, state: GoState) -> int:
        """The one stone of the side to move that the last move took (a cell),
        or -1; a ko point when the taking stone then stands alone in atari."""
        if not state.recent or self.last_cell(state) < 0:
            return -1
        black, white = state.recent[0]
        taken = (black if state.ply % 2 == 0 else white) & ~state.me
        if not taken or taken & (taken - 1):
            return -1
        return self.cell_bits.index(taken)

    def _liberty_planes(self, state: GoState, last: int, ko: int, out: np.ndarray) -> None:
        """:func:`~zeroloop.engine.games.go_kernels.liberty_planes` in Python."""
        empty = self.board_bits & ~(state.me | state.opp)
        for side, stones in enumerate((state.me, state.opp)):
            rest = stones
            while rest:
                g = self.group(rest & -rest, stones)
                rest &= ~g
                libs = (self._around(g) & empty).bit_count()
                out[3 * side + min(libs, 3) - 1] += self.bits_to_cells([g])[0]
        if ko >= 0 and last >= 0:
            g = self.group(self.cell_bits[last], state.opp)
            if g == self.cell_bits[last] and (self._around(g) & empty).bit_count() == 1:
                out[6, ko] = 1.0

    # -- notation ---------------------------------------------------------
    def _col_label(self, c: int) -> str:
        return COLUMNS[c]

    def format_action(self, action: int) -> str:
        if action == self.pass_action:
            return "pass"
        r, c = divmod(action, self.cols)
        return f"{COLUMNS[c]}{self.rows - r}"

    def parse_action(self, text: str) -> int:
        t = text.strip().upper()
        if t == "PASS":
            return self.pass_action
        m = re.fullmatch(r"([A-Z])(\d+)", t)
        if not m or m.group(1) == "I":
            raise IllegalMoveError(f"{text!r} is not a point like 'D4' (no I column) or 'pass'")
        c, row = COLUMNS.index(m.group(1)), int(m.group(2))
        if not (c < self.cols and 1 <= row <= self.rows):
            raise IllegalMoveError(f"{text!r} is off the {self.rows}x{self.cols} board")
        return (self.rows - row) * self.cols + c

    def render(self, state: State) -> str:
        text = super().render(state)
        b, w = self.area(*self._boards(state, state.me, state.opp))
        lead = b - w - self.komi
        margin = "" if lead == 0 else f" ({'X' if lead > 0 else 'O'} by {abs(lead):g})"
        return f"{text}\narea X {b} - O {w}, komi {self.komi:g}{margin}"
