"""Go's rules as numba kernels over cell arrays (see :mod:`zeroloop.engine.games.go`).

A board reaches a kernel as four 63-bit words: the mover's stones and the
opponent's, each split as ``(x & WORD, x >> 63)`` of :class:`Go`'s padded
bitboard, so boards up to 126 bits (10x10) pass as plain integers; larger
boards keep the Python rules. Inside, the stones become a cell array and the
chains are found once by flood fill over a neighbour table, which gives each
chain its liberties and its Zobrist key (the XOR of a random 64-bit number per
stone and colour, :func:`zobrist_table`).

A point is legal when it is empty and the stone placed there has a liberty:
an empty neighbour, an opponent chain it captures (in atari), or an own chain
with another liberty. Superko needs the boards of the whole game, which stay
in Python: :func:`legal_points` also gives each legal point's Zobrist key
after the move (captures removed), which the caller looks up among the keys
of the game's boards; only a key already seen (a repetition, or a 64-bit
collision) is checked against the boards themselves.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: bits a word carries (numba takes signed 64-bit integers)
WORD_BITS = 63
WORD = (1 << WORD_BITS) - 1
#: the largest padded bitboard the kernels take
MAX_BITS = 2 * WORD_BITS


def words(x: int) -> tuple[int, int]:
    """A bitboard as the two words a kernel takes."""
    return x & WORD, x >> WORD_BITS


def zobrist_table(cells: int) -> np.ndarray:
    """``[cells, 2]`` int64: a fixed random key per point and colour (0 black, 1 white);
    the same for every run, so keys agree across processes."""
    rng = np.random.default_rng(0x60_7A_B1E)
    return rng.integers(-(2**63), 2**63 - 1, size=(cells, 2), dtype=np.int64)


@njit(cache=True)
def _cells(me0, me1, opp0, opp1, bit_of_cell, board):
    """Fill ``board[i]``: 0 empty, 1 the mover's stone, 2 the opponent's."""
    for i in range(bit_of_cell.shape[0]):
        b = bit_of_cell[i]
        if b < 63:
            m, o = (me0 >> b) & 1, (opp0 >> b) & 1
        else:
            m, o = (me1 >> (b - 63)) & 1, (opp1 >> (b - 63)) & 1
        board[i] = 1 if m else (2 if o else 0)


@njit(cache=True)
def _chains(board, nbr, zob, mover_colour, chain, libs, keys):
    """Label the chains: ``chain[i]`` the chain of stone ``i`` (-1 on empty
    points), ``libs[c]`` its distinct liberties, ``keys[c]`` the XOR of its
    stones' keys. Returns the number of chains and the board's key."""
    n = board.shape[0]
    stack = np.empty(n, np.int64)
    stamp = np.full(n, -1, np.int64)  # the chain that last counted this empty point
    for i in range(n):
        chain[i] = -1
    count = 0
    board_key = np.int64(0)
    for start in range(n):
        if board[start] == 0 or chain[start] >= 0:
            continue
        colour = board[start]
        z = mover_colour if colour == 1 else 1 - mover_colour
        chain[start] = count
        stack[0] = start
        top = 1
        lib, key = 0, np.int64(0)
        while top:
            top -= 1
            p = stack[top]
            key ^= zob[p, z]
            for k in range(4):
                q = nbr[p, k]
                if q < 0:
                    continue
                if board[q] == 0:
                    if stamp[q] != count:
                        stamp[q] = count
                        lib += 1
                elif board[q] == colour and chain[q] < 0:
                    chain[q] = count
                    stack[top] = q
                    top += 1
        libs[count] = lib
        keys[count] = key
        board_key ^= key
        count += 1
    return count, board_key


@njit(cache=True)
def _analysis(me0, me1, opp0, opp1, bit_of_cell, nbr, zob, mover_colour):
    """The board as cells (:func:`_cells`) and its chains (:func:`_chains`):
    ``(board, chain, libs, keys, chains, board_key)``."""
    n = bit_of_cell.shape[0]
    board = np.empty(n, np.int8)
    _cells(me0, me1, opp0, opp1, bit_of_cell, board)
    chain = np.empty(n, np.int64)
    libs = np.empty(n, np.int64)
    keys = np.empty(n, np.int64)
    count, board_key = _chains(board, nbr, zob, mover_colour, chain, libs, keys)
    return board, chain, libs, keys, count, board_key


@njit(cache=True)
def legal_points(me0, me1, opp0, opp1, black_moves, bit_of_cell, nbr, zob, legal, after_keys):
    """``legal[i]`` whether point ``i`` may be played, superko aside
    (``legal[cells]``, the pass, is set too), and ``after_keys[:k]`` the
    board's key after each of the ``k`` legal points, in point order.
    Returns ``k``."""
    n = bit_of_cell.shape[0]
    mover_colour = 0 if black_moves else 1
    board, chain, libs, keys, _, board_key = _analysis(me0, me1, opp0, opp1, bit_of_cell, nbr, zob,
                                                       mover_colour)
    taken = np.full(4, -1, np.int64)
    count = 0
    for i in range(n):
        legal[i] = False
        if board[i] != 0:
            continue
        key = board_key ^ zob[i, mover_colour]
        ok = False
        ntaken = 0
        for k in range(4):
            q = nbr[i, k]
            if q < 0:
                continue
            if board[q] == 0:
                ok = True
            else:
                c = chain[q]
                if board[q] == 1:
                    if libs[c] > 1:
                        ok = True
                elif libs[c] == 1:
                    ok = True
                    fresh = True
                    for t in range(ntaken):
                        if taken[t] == c:
                            fresh = False
                    if fresh:
                        taken[ntaken] = c
                        ntaken += 1
                        key ^= keys[c]
        if ok:
            legal[i] = True
            after_keys[count] = key
            count += 1
    legal[n] = True
    return count


@njit(cache=True)
def play_point(me0, me1, opp0, opp1, black_moves, point, bit_of_cell, nbr, zob):
    """The mover's stone on the empty ``point``, with captures: ``(ok, me0,
    me1, opp0, opp1, key)``, the words of both sides' stones after it and the
    board's key; ``ok`` False (the rest meaningless) when it is suicide."""
    n = bit_of_cell.shape[0]
    mover_colour = 0 if black_moves else 1
    board, chain, libs, keys, count, key = _analysis(me0, me1, opp0, opp1, bit_of_cell, nbr, zob,
                                                     mover_colour)
    key ^= zob[point, mover_colour]
    ok = False
    captured = np.zeros(count, np.bool_)
    for k in range(4):
        q = nbr[point, k]
        if q < 0:
            continue
        if board[q] == 0:
            ok = True
        elif board[q] == 1:
            if libs[chain[q]] > 1:
                ok = True
        elif libs[chain[q]] == 1 and not captured[chain[q]]:
            ok = True
            captured[chain[q]] = True
            key ^= keys[chain[q]]
    b = bit_of_cell[point]
    if b < 63:
        me0 |= np.int64(1) << b
    else:
        me1 |= np.int64(1) << (b - 63)
    for i in range(n):
        if board[i] == 2 and captured[chain[i]]:
            b = bit_of_cell[i]
            if b < 63:
                opp0 &= ~(np.int64(1) << b)
            else:
                opp1 &= ~(np.int64(1) << (b - 63))
    return ok, me0, me1, opp0, opp1, key


@njit(cache=True)
def liberty_planes(me0, me1, opp0, opp1, last, ko, bit_of_cell, nbr, out):
    """Fill ``out`` ``[7, cells]`` (zeroed by the caller): the mover's stones
    in chains of 1, 2 and 3+ liberties, the opponent's likewise, and the ko
    point: ``ko``, the one stone the last move (``last``) took, when that
    move's stone stands alone with that point its only liberty (retaking it
    would repeat the board); -1 for none."""
    n = bit_of_cell.shape[0]
    no_keys = np.zeros((n, 2), np.int64)
    board, chain, libs, _, _, _ = _analysis(me0, me1, opp0, opp1, bit_of_cell, nbr, no_keys, 0)
    for i in range(n):
        if board[i] != 0:
            plane = 3 * (board[i] - 1) + min(libs[chain[i]], 3) - 1
            out[plane, i] = 1.0
    if ko >= 0 and last >= 0 and board[last] == 2 and libs[chain[last]] == 1:
        alone = True
        for k in range(4):
            q = nbr[last, k]
            if q >= 0 and board[q] == 2:
                alone = False
        if alone:
            out[6, ko] = 1.0


@njit(cache=True)
def area(black0, black1, white0, white1, bit_of_cell, nbr):
    """Tromp-Taylor area ``(black, white)``: each side's stones plus the
    empty points that reach only its stones."""
    n = bit_of_cell.shape[0]
    board = np.empty(n, np.int8)
    _cells(black0, black1, white0, white1, bit_of_cell, board)  # 1 Black, 2 White
    b_area, w_area = 0, 0
    for i in range(n):
        if board[i] == 1:
            b_area += 1
        elif board[i] == 2:
            w_area += 1
    stack = np.empty(n, np.int64)
    done = np.zeros(n, np.bool_)
    for start in range(n):
        if board[start] != 0 or done[start]:
            continue
        done[start] = True
        stack[0] = start
        top, size, reach = 1, 0, 0  # reach: 1 Black's stones seen, 2 White's, 3 both
        while top:
            top -= 1
            p = stack[top]
            size += 1
            for k in range(4):
                q = nbr[p, k]
                if q < 0:
                    continue
                if board[q] == 0:
                    if not done[q]:
                        done[q] = True
                        stack[top] = q
                        top += 1
                else:
                    reach |= board[q]
        if reach == 1:
            b_area += size
        elif reach == 2:
            w_area += size
    return b_area, w_area


@njit(cache=True)
def board_key(black0, black1, white0, white1, bit_of_cell, zob):
    """The Zobrist key of a board given as Black's and White's stones."""
    board = np.empty(bit_of_cell.shape[0], np.int8)
    _cells(black0, black1, white0, white1, bit_of_cell, board)  # 1 Black, 2 White
    key = np.int64(0)
    for i in range(board.shape[0]):
        if board[i]:
            key ^= zob[i, board[i] - 1]
    return key
