"""Connect Four over rows of arrays: a search step's leaves applied, checked,
and encoded in numba, all at once (issue 51 part 3: with a cheap network the
Python of one ``State`` per leaf was most of self-play).

A position is a row of :class:`~zeroloop.engine.games.base.Rows` (the
search's tree keeps one per node): ``me`` and ``opp`` as
:class:`~zeroloop.engine.games.connect4.ConnectFour` lays its bitboards out
(cell ``(r, c)`` at bit ``8 r + c``, row 0 on top), ``ply``, and ``last``,
the last move's column (-1: none). Each kernel gives what the game's Python
methods give for the same states, bit for bit (``tests/test_games.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

ROWS, COLS = 6, 7
# column c's cells, the bottom cell of each column, every cell, and each cell's bit
COLUMN = np.array([sum(1 << (8 * r + c) for r in range(ROWS)) for c in range(COLS)], np.int64)
BOTTOM = np.array([1 << (8 * (ROWS - 1) + c) for c in range(COLS)], np.int64)
BOARD = sum(1 << (8 * r + c) for r in range(ROWS) for c in range(COLS))
CELL_BIT = np.array([8 * r + c for r in range(ROWS) for c in range(COLS)], np.int64)


@njit(cache=True)
def apply_rows(me, opp, ply, last, parents, actions, leaves, outcome):
    """Play ``actions[i]`` in row ``parents[i]`` into row ``leaves[i]``
    (``ConnectFour.apply``; the move must be legal) and set ``outcome[i]``
    from the new side to move: -1.0 a loss (the move made four), 0.0 a draw
    (a full board), NaN while the game runs."""
    for i in range(parents.shape[0]):
        p, a, c = parents[i], actions[i], leaves[i]
        m, o = me[p], opp[p]
        stones = (m | o) & COLUMN[a]
        # the column's top stone is its lowest bit; the free cell is the one above it
        m |= ((stones & -stones) >> 8) if stones else BOTTOM[a]
        x = m & (m >> 1)
        if x & (x >> 2):
            outcome[i] = -1.0
        else:
            x = m & (m >> 8)
            y = m & (m >> 9)
            z = m & (m >> 7)
            if x & (x >> 16) or y & (y >> 18) or z & (z >> 14):
                outcome[i] = -1.0
            elif (m | o) == BOARD:
                outcome[i] = 0.0
            else:
                outcome[i] = np.nan
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
