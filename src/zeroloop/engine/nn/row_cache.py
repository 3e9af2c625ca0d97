"""The position cache of :class:`~zeroloop.engine.nn.FixedBatchEvaluator` over
arrays, for positions that come as rows (:class:`~zeroloop.engine.games.base.Rows`):
keys, lookups and evictions in numba, a whole request at once.

The same cache as the evaluator's dictionary one: it remembers the answers
of the ``capacity`` positions used last (least recently used out first; a
position asked for again is fresh again; of more new positions than it holds
in one request, the last ones), and repeated positions in one request are
computed once. A position's key is what ``encode`` reads of it
(:func:`~zeroloop.engine.nn.inference.position_key`): its stones, the last
move and the side to move, three int64 words.

Layout: entries (a key, an answer, and a doubly linked list from the least
to the most recently used) and an open-addressing table of entry numbers
(linear probing, backward-shift deletion), twice as many slots as entries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M0, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)
_F1, _F2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S27, _S30, _S31 = np.uint64(27), np.uint64(30), np.uint64(31)


@njit(cache=True)
def _slot(k0, k1, k2, mask):
    """The key's home slot: the three words mixed, then splitmix64's
    finaliser (every bit of the key reaches the low bits a small table uses)."""
    h = np.uint64(k0) * _M0 ^ np.uint64(k1) * _M1 ^ np.uint64(k2) * _M2
    h = (h ^ (h >> _S30)) * _F1
    h = (h ^ (h >> _S27)) * _F2
    return np.int64((h ^ (h >> _S31)) & np.uint64(mask))


@njit(cache=True)
def _find(table, keys, k0, k1, k2):
    """The entry of key ``(k0, k1, k2)`` and its slot, or -1 and the empty
    slot that ends its probe."""
    mask = table.shape[0] - 1
    i = _slot(k0, k1, k2, mask)
    while True:
        e = table[i]
        if e < 0 or (keys[e, 0] == k0 and keys[e, 1] == k1 and keys[e, 2] == k2):
            return e, i
        i = (i + 1) & mask


@njit(cache=True)
def _unlink(links, ends, e):
    p, n = links[e, 0], links[e, 1]
    if p >= 0:
        links[p, 1] = n
    else:
        ends[0] = n
    if n >= 0:
        links[n, 0] = p
    else:
        ends[1] = p


@njit(cache=True)
def _append(links, ends, e):
    t = ends[1]
    links[e, 0], links[e, 1] = t, -1
    if t >= 0:
        links[t, 1] = e
    else:
        ends[0] = e
    ends[1] = e


@njit(cache=True)
def _drop(table, keys, e):
    """Take entry ``e``'s key out of the table (backward-shift deletion)."""
    mask = table.shape[0] - 1
    _, i = _find(table, keys, keys[e, 0], keys[e, 1], keys[e, 2])
    j = i
    while True:
        j = (j + 1) & mask
        f = table[j]
        if f < 0:
            break
        h = _slot(keys[f, 0], keys[f, 1], keys[f, 2], mask)
        # f stays when its home slot h lies cyclically in (i, j]
        if (i < h <= j) if i <= j else (h > i or h <= j):
            continue
        table[i] = f
        i = j
    table[i] = -1


@njit(cache=True)
def lookup(table, keys, links, ends, priors, values, query, out_p, out_v, compute_of, firsts, scratch):
    """Answer each query key (``query[i]``) from the cache (``out_p[i]``,
    ``out_v[i]``, the entry made the most recently used, ``compute_of[i]`` -1)
    or give it a row of the positions to compute, repeated keys one row
    (``compute_of[i]``; ``firsts[j]`` the first query of row ``j``).
    ``scratch``: an int64 table of at least twice the queries' slots, a power
    of two. Returns (hits, rows to compute)."""
    scratch[:] = -1
    smask = scratch.shape[0] - 1
    hits = m = 0
    for i in range(query.shape[0]):
        k0, k1, k2 = query[i, 0], query[i, 1], query[i, 2]
        e, _ = _find(table, keys, k0, k1, k2)
        if e >= 0:
            _unlink(links, ends, e)
            _append(links, ends, e)
            out_p[i] = priors[e]
            out_v[i] = values[e]
            compute_of[i] = -1
            hits += 1
            continue
        s = _slot(k0, k1, k2, smask)
        while True:
            j = scratch[s]
            if j < 0:
                scratch[s] = m
                firsts[m] = i
                compute_of[i] = m
                m += 1
                break
            f = firsts[j]
            if query[f, 0] == k0 and query[f, 1] == k1 and query[f, 2] == k2:
                compute_of[i] = j
                break
            s = (s + 1) & smask
    return hits, m


@njit(cache=True)
def remember(table, keys, links, ends, priors, values, query, firsts, m, new_p, new_v):
    """Cache the computed rows ``j < m`` (keys ``query[firsts[j]]``, answers
    ``new_p[j]``, ``new_v[j]``), each in a free entry or the least recently
    used one's; of more than the cache holds, the last ones."""
    capacity = keys.shape[0]
    for j in range(max(0, m - capacity), m):
        if ends[2] < capacity:
            e = ends[2]
            ends[2] += 1
        else:
            e = ends[0]
            _drop(table, keys, e)
            _unlink(links, ends, e)
        i = firsts[j]
        keys[e, 0], keys[e, 1], keys[e, 2] = query[i, 0], query[i, 1], query[i, 2]
        priors[e] = new_p[j]
        values[e] = new_v[j]
        _append(links, ends, e)
        _, s = _find(table, keys, keys[e, 0], keys[e, 1], keys[e, 2])
        table[s] = e


@njit(cache=True)
def row_keys(me, opp, ply, last, rows, out):
    """``out[i]``: the key of row ``rows[i]``: ``me``, ``opp``, and
    ``(last + 1) * 2`` plus the side to move (``ply & 1``)."""
    for i in range(rows.shape[0]):
        r = rows[i]
        out[i, 0], out[i, 1], out[i, 2] = me[r], opp[r], (last[r] + 1) * 2 + (ply[r] & 1)


@njit(cache=True)
def scatter(compute_of, new_p, new_v, out_p, out_v):
    """The computed answers to the queries that asked for them
    (``compute_of[i]`` >= 0: row ``compute_of[i]`` of ``new_p``, ``new_v``)."""
    for i in range(compute_of.shape[0]):
        j = compute_of[i]
        if j >= 0:
            out_p[i] = new_p[j]
            out_v[i] = new_v[j]


def _pow2(n: int) -> int:
    return 1 << max(3, (max(n, 1) - 1).bit_length())


class RowCache:
    """The cache's arrays for ``capacity`` positions of ``actions`` moves (0:
    none; requests still compute repeated positions once)."""

    def __init__(self, capacity: int, actions: int) -> None:
        n = max(capacity, 0)
        self.capacity = n
        self.table = np.full(_pow2(2 * n), -1, np.int64)
        self.keys = np.zeros((n, 3), np.int64)
        self.links = np.full((n, 2), -1, np.int64)  # previous (less recently used), next
        self.ends = np.array([-1, -1, 0], np.int64)  # least recently used, most, entries in use
        self.priors = np.zeros((n, actions), np.float32)
        self.values = np.zeros(n, np.float32)
        self._scratch = np.empty(0, np.int64)

    def state(self) -> tuple:
        return self.table, self.keys, self.links, self.ends, self.priors, self.values

    def lookup(self, query: np.ndarray, out_p: np.ndarray, out_v: np.ndarray
               ) -> tuple[int, int, np.ndarray, np.ndarray]:
        """:func:`lookup`: (hits, rows to compute, each query's row or -1, each row's first query)."""
        n = len(query)
        if len(self._scratch) < 2 * n:
            self._scratch = np.empty(_pow2(2 * n), np.int64)
        compute_of, firsts = np.empty(n, np.int64), np.empty(n, np.int64)
        hits, m = lookup(*self.state(), query, out_p, out_v, compute_of, firsts, self._scratch)
        return hits, m, compute_of, firsts

    def remember(self, query: np.ndarray, firsts: np.ndarray, m: int, new_p: np.ndarray,
                 new_v: np.ndarray) -> None:
        if self.capacity and m:
            remember(*self.state(), query, firsts, m, new_p, new_v)

    def keys_by_use(self) -> list[tuple[int, int, int]]:
        """The cached keys, least recently used first."""
        out, e = [], int(self.ends[0])
        while e >= 0:
            out.append(tuple(int(k) for k in self.keys[e]))
            e = int(self.links[e, 1])
        return out
