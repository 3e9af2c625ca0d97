"""The GTP engine's searches: one tree grown in chunks, stopped by a
deadline (a clock), a simulation cap or a new command (analysis), and read
as Leela Zero's ``lz-analyze`` lines; and the engine's judgement of which
stones are dead, for ``final_status_list`` and ``kgs-genmove_cleanup``; the
stream ``lz-analyze`` writes, and GTP's fixed handicap points."""

from __future__ import annotations

import math
import queue
import time
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from zeroloop.engine.games import State
from zeroloop.engine.games.go import COLUMNS, Go

#: simulations per chunk while an analysis runs (its lines come between chunks)
ANALYSIS_CHUNK = 16
#: random playouts behind the dead-stone judgement
STATUS_PLAYOUTS = 64


class RootSearch:
    """A PUCT search (no noise) of one position that grows by :meth:`step`
    up to ``max_sims`` simulations; the tree is kept between steps."""

    def __init__(self, game: Go, evaluator, state: State, max_sims: int, rng: np.random.Generator) -> None:
        from zeroloop.engine.search import BatchedMCTS, SearchConfig

        self.game, self.state, self.max_sims = game, state, max_sims
        self.mcts = BatchedMCTS(game, evaluator, SearchConfig(simulations=max_sims), 1, rng=rng)
        self.mcts.set_root(0, state)
        self.done = 0
        self.result = None
        self.search_s = 0.0

    def step(self, n: int) -> int:
        """Run up to ``n`` more simulations; how many ran."""
        n = min(n, self.max_sims - self.done)
        if n > 0:
            t0 = time.perf_counter()
            self.result = self.mcts.search([0], simulations=n)
            self.search_s += time.perf_counter() - t0
            self.done += n
        return n

    def until(self, deadline: float) -> None:
        """Search until ``max_sims`` or until the next chunk would end past
        ``deadline`` (a ``time.perf_counter`` time); at least one simulation.
        Chunks double from 1 while the measured rate says they fit."""
        self.step(1)
        chunk = 1
        while self.done < self.max_sims:
            rate = self.done / max(self.search_s, 1e-6)  # simulations a second, measured
            room = deadline - time.perf_counter()
            chunk = min(2 * chunk, 256, int(room * rate / 2))
            if chunk < 1:
                break
            self.step(chunk)

    def best(self) -> int:
        from zeroloop.engine.search.choice import chosen_moves

        return chosen_moves(self.result, [self.state.ply])[0]

    def _pv(self, row: int, first: int, depth: int = 12) -> list[int]:
        tree, pv = self.mcts.tree, [first]
        row = int(tree.child[row, first])
        while row >= 0 and len(pv) < depth and tree.edge_n[row].max() > 0:
            a = int(tree.edge_n[row].argmax())
            pv.append(a)
            row = int(tree.child[row, a])
        return pv

    def info(self) -> str:
        """The root's visited moves as one Leela Zero ``info`` line: most
        visits first, winrate (the mover's, from the move's mean value) and
        prior in 1/10000, ``lcb`` a normal-approximation lower bound on the
        winrate, the principal variation by most visits."""
        if self.result is None:
            return ""
        row = int(self.mcts.slots.root[0])
        visits, q = self.result.visits[0], self.result.q[0]
        prior = self.mcts.tree.prior[row]
        parts = []
        for order, a in enumerate(np.argsort(-visits, kind="stable")[:(visits > 0).sum()]):
            n = int(visits[a])
            win = (float(q[a]) + 1) / 2
            lcb = max(0.0, win - 1.96 * math.sqrt(max(win * (1 - win), 0.01) / n))
            pv = " ".join(self.game.format_action(m) for m in self._pv(row, int(a)))
            parts.append(f"info move {self.game.format_action(int(a))} visits {n} winrate "
                         f"{round(win * 10000)} prior {round(float(prior[a]) * 10000)} lcb "
                         f"{round(lcb * 10000)} order {order} pv {pv}")
        return " ".join(parts)


# -- dead stones ---------------------------------------------------------------


def _playout(game: Go, me: int, opp: int, rng: np.random.Generator) -> tuple[int, int]:
    """A random game from (mover, opponent) to two passes that never fills a
    point all of whose neighbours are the mover's own (an eye); the final
    (mover, opponent) boards. Ko is not checked: the length is capped."""
    passes, turn = 0, 0
    for _ in range(game.max_moves):
        empty = game.board_bits & ~(me | opp)
        cells = []
        while empty:
            b = empty & -empty
            empty ^= b
            cells.append(b)
        played = False
        for i in rng.permutation(len(cells)).tolist():
            b = cells[i]
            if not game._around(b) & ~me:
                continue
            after = game._play_stone(me, opp, b)
            if after is not None:
                me, opp = after
                played = True
                break
        passes = 0 if played else passes + 1
        if passes == 2:
            break
        me, opp, turn = opp, me, turn ^ 1
    return (me, opp) if turn == 0 else (opp, me)


def dead_chains(game: Go, state: State, seed: int = 0, playouts: int = STATUS_PLAYOUTS) -> list[int]:
    """The chains (bitboards) the engine judges dead: those whose points
    the other colour owns at the end of most of ``playouts`` random games
    (eyes left unfilled) from ``state``. Seki is not told apart: stones in
    seki come out alive or dead as the playouts leave them."""
    rng = np.random.default_rng(seed)
    me, opp = state.me, state.opp
    chains: list[tuple[int, bool]] = []
    for stones, is_me in ((me, True), (opp, False)):
        rest = stones
        while rest:
            g = game.group(rest & -rest, stones)
            rest &= ~g
            chains.append((g, is_me))
    if not chains:
        return []
    mine = np.zeros(len(chains))
    for _ in range(playouts):
        end_me, end_opp = _playout(game, me, opp, rng)
        own_me, own_opp = game.owned(end_me, end_opp)
        for i, (g, is_me) in enumerate(chains):
            lowest = g & -g
            mine[i] += bool(lowest & (own_me if is_me else own_opp))
    return [g for (g, _), alive in zip(chains, mine, strict=True) if alive * 2 < playouts]


def capture_move(game: Go, state: State, dead: list[int]) -> int | None:
    """A legal move of the side to move on a liberty of one of the opponent's
    ``dead`` chains, preferring one that leaves its own chain two liberties; None
    when there is no such move."""
    legal = game.legal_mask(state)
    empty = game.board_bits & ~(state.me | state.opp)
    fallback = None
    for g in dead:
        if not g & state.opp:
            continue
        libs = game._around(g) & empty
        while libs:
            b = libs & -libs
            libs ^= b
            a = game.cell_bits.index(b)
            if not legal[a]:
                continue
            after = game._play_stone(state.me, state.opp, b)
            if after is not None:
                libs_after = game._around(game.group(b, after[0])) & ~(after[0] | after[1])
                if libs_after.bit_count() >= 2:
                    return a
            fallback = a if fallback is None else fallback
    return fallback


#: the most simulations one analysis runs (its tree's memory: ~2 KB a simulation on 9x9)
ANALYSIS_SIMS = 20_000


def fixed_handicap_points(size: int) -> dict[int, list[str]]:
    """GTP 2's fixed handicap placement (section 4.1.1 and ``fixed_handicap``):
    none below 8x8; on even boards 2-4 stones, on odd ones 2-9; the corner
    points on the third line below 13x13, the fourth from 13x13."""
    if size < 8:
        return {}
    line = 3 if size < 13 else 4
    lo, hi, mid = line, size + 1 - line, (size + 1) // 2

    def v(col: int, row: int) -> str:
        return f"{COLUMNS[col - 1]}{row}"

    corners = [v(lo, lo), v(hi, hi), v(lo, hi), v(hi, lo)]
    table = {2: corners[:2], 3: corners[:3], 4: corners}
    if size % 2:
        sides = [v(lo, mid), v(hi, mid)]
        table |= {5: corners + [v(mid, mid)], 6: corners + sides, 7: corners + sides + [v(mid, mid)],
                  8: corners + sides + [v(mid, lo), v(mid, hi)],
                  9: corners + sides + [v(mid, lo), v(mid, hi), v(mid, mid)]}
    return table


def chains(game: Go, stones: int) -> list[int]:
    """The chains (bitboards) of ``stones``."""
    out = []
    while stones:
        g = game.group(stones & -stones, stones)
        stones &= ~g
        out.append(g)
    return out


@dataclass
class AnalysisStream:
    """An ``lz-analyze`` under way: the search and the seconds between lines."""

    search: RootSearch
    interval_s: float

    def run(self, lines: queue.Queue, out: TextIO) -> str | None:
        """Search and write an ``info`` line every interval until a line
        arrives on ``lines``; end the stream with an empty line; that line
        (None: the input ended)."""
        next_at = time.perf_counter() + self.interval_s
        while True:
            if self.search.done < self.search.max_sims:
                self.search.step(ANALYSIS_CHUNK)
                try:
                    line = lines.get_nowait()
                except queue.Empty:
                    line = ""
            else:  # the tree is full: wait for the next command
                try:
                    line = lines.get(timeout=max(next_at - time.perf_counter(), 0.001))
                except queue.Empty:
                    line = ""
            if line != "":
                break
            if time.perf_counter() >= next_at:
                out.write(self.search.info() + "\n")
                out.flush()
                next_at = time.perf_counter() + self.interval_s
        out.write("\n")
        out.flush()
        return line
