"""Connect Four over rows of arrays: a search step's leaves applied, checked,
and encoded in numba, all at once (issue 51 part 3: with a cheap network the
Python of one ``State`` per leaf was most of self-play).

A position is a row of :class:`~zeroloop.engine.games.base.Rows` (the
search's tree keeps one per node): ``me`` and ``opp`` as
:class:`~zeroloop.engine.games.connect4.ConnectFour` lays its bitboards out
(cell ``(r, c)`` at bit ``8 r + c``, row 0 on top), ``ply``, and ``last``,
the last move's column (-1: none). Each kernel gives what the game's Python
methods give for the same states, bit for bit (``tests/test_games.py``).

Rollout UCT, the evaluation's baseline, has a kernel here too
(:func:`uct_visits`): the search of ``zeroloop.engine.search.uct`` over
arrays, drawing the same numbers from the same generator.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

ROWS, COLS = 6, 7
# column c's cells, the bottom cell of each column, every cell, and each cell's bit
COLUMN = np.array([sum(1 << (8 * r + c) for r in range(ROWS)) for c in range(COLS)], np.int64)
BOTTOM = np.array([1 << (8 * (ROWS - 1) + c) for c in range(COLS)], np.int64)
BOARD = sum(1 << (8 * r + c) for r in range(ROWS) for c in range(COLS))
CELL_BIT = np.array([8 * r + c for r in range(ROWS) for c in range(COLS)], np.int64)


@njit(cache=True)
def _four(m):
    """Whether bitboard ``m`` holds four in a row (``KInARowGame.has_line``)."""
    x = m & (m >> 1)
    if x & (x >> 2):
        return True
    x = m & (m >> 8)
    if x & (x >> 16):
        return True
    x = m & (m >> 9)
    if x & (x >> 18):
        return True
    x = m & (m >> 7)
    return (x & (x >> 14)) != 0


@njit(cache=True)
def _play(m, o, a):
    """``m``'s stones after dropping one in column ``a`` (legal) of the board
    ``m | o``, and the outcome for the side to move next (``o``'s): -1.0 a
    loss (the move made four), 0.0 a draw (a full board), NaN while the game
    runs (``ConnectFour.apply``)."""
    stones = (m | o) & COLUMN[a]
    # the column's top stone is its lowest bit; the free cell is the one above it
    m |= ((stones & -stones) >> 8) if stones else BOTTOM[a]
    if _four(m):
        return m, -1.0
    if (m | o) == BOARD:
        return m, 0.0
    return m, np.nan


@njit(cache=True)
def apply_rows(me, opp, ply, last, parents, actions, leaves, outcome):
    """Play ``actions[i]`` in row ``parents[i]`` into row ``leaves[i]``
    (``ConnectFour.apply``; the move must be legal) and set ``outcome[i]``
    from the new side to move (:func:`_play`)."""
    for i in range(parents.shape[0]):
        p, a, c = parents[i], actions[i], leaves[i]
        o = opp[p]
        m, outcome[i] = _play(me[p], o, a)
        me[c], opp[c], ply[c], last[c] = o, m, ply[p] + 1, a


@njit(cache=True)
def legal_rows(me, opp, rows, out):
    """``out[i]``: the legal moves of row ``rows[i]`` (a running game): the
    columns whose top cell is empty."""
    for i in range(rows.shape[0]):
        full = me[rows[i]] | opp[rows[i]]
        for c in range(COLS):
            out[i, c] = not (full >> c) & 1


@njit(cache=True)
def encode_rows(me, opp, ply, last, rows, out):
    """``ConnectFour.encode`` of rows ``rows`` into ``out[:len(rows)]``
    (``[B, 4, 6, 7]`` float32: the mover's stones, the opponent's, the last
    move's stone, ones when the first player is to move), and copies of the
    last row into the rest of ``out`` (a fixed batch's padding)."""
    n = rows.shape[0]
    for i in range(out.shape[0]):
        if i >= n:
            out[i] = out[n - 1]
            continue
        r = rows[i]
        m, o = me[r], opp[r]
        mark = 0
        if last[r] >= 0:
            stones = (m | o) & COLUMN[last[r]]
            mark = stones & -stones
        colour = np.float32(1.0 if ply[r] % 2 == 0 else 0.0)
        for k in range(ROWS * COLS):
            b = CELL_BIT[k]
            y, x = k // COLS, k % COLS
            out[i, 0, y, x] = (m >> b) & 1
            out[i, 1, y, x] = (o >> b) & 1
            out[i, 2, y, x] = (mark >> b) & 1
            out[i, 3, y, x] = colour


@njit(cache=True)
def _open_columns(m, o, out):
    """The columns a running game may play, in order, into ``out``; their count."""
    k = 0
    for c in range(COLS):
        if not ((m | o) >> c) & 1:
            out[k] = c
            k += 1
    return k


@njit(cache=True)
def _playout(m, o, rng):
    """``ConnectFour.random_playout`` of a running game (``m`` to move): the
    result for ``m``'s side of random moves to the end, the ``i``-th open
    column (in order) for each draw ``rng.integers(open columns)``."""
    moves = np.empty(COLS, np.int64)
    k = _open_columns(m, o, moves)
    free = np.zeros(COLS, np.int64)  # each open column's next free cell
    for j in range(k):
        c = moves[j]
        h = 0
        for r in range(ROWS):
            h += ((m | o) >> (8 * r + c)) & 1
        free[c] = 1 << (8 * (ROWS - 1 - h) + c)
    sign = 1.0
    while True:
        i = rng.integers(0, k)
        c = moves[i]
        bit = free[c]
        if bit == 1 << c:  # the top cell: the column is full now
            for j in range(i, k - 1):
                moves[j] = moves[j + 1]
            k -= 1
        else:
            free[c] = bit >> 8
        m |= bit
        if _four(m):
            return sign
        if k == 0:
            return 0.0
        m, o = o, m
        sign = -sign


@njit(cache=True)
def uct_visits(me0, opp0, playouts, c, rng, actions, visits):
    """Rollout UCT from a running game (``me0`` to move), as
    ``zeroloop.engine.search.uct.generic_uct_search`` runs it, draw for draw
    of ``rng``: each iteration descends by UCB1 (the first of the best child,
    in the order the children were made), expands one untried move drawn at
    random, and scores the new node by its result or a random playout. The
    root's children go into ``actions`` and ``visits`` in the order they were
    made; returns how many there are."""
    cap = playouts + 1  # an iteration makes one node at most
    me, opp = np.empty(cap, np.int64), np.empty(cap, np.int64)
    result = np.empty(cap, np.float64)  # the outcome from the side to move; NaN while the game runs
    n, w = np.zeros(cap, np.int64), np.zeros(cap, np.float64)
    untried, n_untried = np.empty((cap, COLS), np.int64), np.zeros(cap, np.int64)
    kids, n_kids = np.empty((cap, COLS), np.int64), np.zeros(cap, np.int64)
    action = np.empty(cap, np.int64)
    path = np.empty(ROWS * COLS + 2, np.int64)
    me[0], opp[0], result[0] = me0, opp0, np.nan
    n_untried[0] = _open_columns(me0, opp0, untried[0])
    made = 1
    for _ in range(playouts):
        node, depth = 0, 0
        path[0] = 0
        while n_untried[node] == 0 and n_kids[node] > 0:
            log_n = math.log(n[node])
            best, best_v = -1, -np.inf
            for j in range(n_kids[node]):
                ch = kids[node, j]
                v = w[ch] / n[ch] + c * math.sqrt(log_n / n[ch])
                if v > best_v:
                    best, best_v = ch, v
            node = best
            depth += 1
            path[depth] = node
        if n_untried[node] > 0:
            i = rng.integers(0, n_untried[node])
            a = untried[node, i]
            for j in range(i, n_untried[node] - 1):
                untried[node, j] = untried[node, j + 1]
            n_untried[node] -= 1
            o = opp[node]
            child = made
            made += 1
            m, result[child] = _play(me[node], o, a)
            me[child], opp[child], action[child] = o, m, a
            if np.isnan(result[child]):
                n_untried[child] = _open_columns(o, m, untried[child])
            kids[node, n_kids[node]] = child
            n_kids[node] += 1
            node = child
            depth += 1
            path[depth] = node
        z = result[node]
        if np.isnan(z):
            z = _playout(me[node], opp[node], rng)
        for d in range(depth, -1, -1):
            k = path[d]
            n[k] += 1
            w[k] += -z  # the mover into k is k's opponent
            z = -z
    for j in range(n_kids[0]):
        actions[j] = action[kids[0, j]]
        visits[j] = n[kids[0, j]]
    return n_kids[0]
