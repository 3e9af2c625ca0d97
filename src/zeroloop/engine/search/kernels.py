"""The batched search's tree as arrays, and the numba kernels that walk it
(see :mod:`zeroloop.engine.search.tree`).

The forest is one :class:`Tree`: flat arrays, one row per node. Every game
slot owns a contiguous pool of ``cap`` rows starting at ``slot * cap``
(:class:`Slots`). Edge statistics sit on the parent's row: ``edge_n[node, a]``
visits and ``edge_w[node, a]`` summed value of action ``a`` seen from the
player to move at ``node``. The kernels take these structures (numba passes
named tuples of arrays as they are) and the search's settings as one
:class:`Params`; which move a descent follows is the selection rule's
(:mod:`zeroloop.engine.search.selection`).

Node kinds: NEW (allocated, waiting for its evaluation), EXPANDED, TERMINAL.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from zeroloop.engine.search.selection import select_action

NEW = 0
EXPANDED = 1
TERMINAL = 2


class Tree(NamedTuple):
    """The nodes of every slot's tree, ``R`` rows, ``A`` actions."""

    child: np.ndarray  # [R, A] int64: the child's row through a, -1 while it has none
    prior: np.ndarray  # [R, A] float32: P(s, a), masked to the legal moves (root noise included)
    edge_n: np.ndarray  # [R, A] float32: N(s, a) (virtual loss included while a leaf is pending)
    edge_w: np.ndarray  # [R, A] float32: summed value of a, from the side to move at s
    legal: np.ndarray  # [R, A] bool
    node_kind: np.ndarray  # [R] int8: NEW, EXPANDED or TERMINAL
    node_value: np.ndarray  # [R] float32: the node's evaluation (exact when terminal), from its side to move
    node_n: np.ndarray  # [R] float32: N(s), the simulations backed up through the node

    @classmethod
    def empty(cls, rows: int, actions: int) -> Tree:
        return cls(np.full((rows, actions), -1, np.int64), np.zeros((rows, actions), np.float32),
                   np.zeros((rows, actions), np.float32), np.zeros((rows, actions), np.float32),
                   np.zeros((rows, actions), np.bool_), np.zeros(rows, np.int8), np.zeros(rows, np.float32),
                   np.zeros(rows, np.float32))


class Slots(NamedTuple):
    """Each game slot's place in the tree, ``S`` slots: slot ``g`` owns rows
    ``[g * cap, (g + 1) * cap)``."""

    root: np.ndarray  # [S] int64: the root's row
    used: np.ndarray  # [S] int64: the first free row of the pool
    remaining: np.ndarray  # [S] int64: simulations still to run in the search under way
    cap: int  # rows per slot


class GumbelState(NamedTuple):
    """Gumbel's root state per slot, and scratch rows (``S`` is 1 under PUCT,
    which only passes it on)."""

    score: np.ndarray  # [S, A] float64: Gumbel + log prior of the considered moves, -1e30 for the others
    target: np.ndarray  # [S, simulations] float32: the visits the move simulation k picks must have
    total: np.ndarray  # [S] int64: the search's simulations
    q: np.ndarray  # [A] float64 scratch: completed Q
    p: np.ndarray  # [A] float64 scratch: the improved policy

    @classmethod
    def empty(cls, slots: int, simulations: int, actions: int) -> GumbelState:
        return cls(np.full((slots, actions), -1e30, np.float64), np.zeros((slots, simulations), np.float32),
                   np.zeros(slots, np.int64), np.zeros(actions, np.float64), np.zeros(actions, np.float64))


class Params(NamedTuple):
    """One search's settings as the kernels read them (see ``SearchConfig``)."""

    gumbel: bool  # the selection rule: Gumbel's, else PUCT's
    leaves_per_slot: int
    vloss: float  # virtual loss (0 with one leaf per slot)
    c_init: float
    c_base: float  # 0: a constant c(s)
    fpu: float
    fpu_reduction: float  # < 0: off (unvisited moves are worth fpu)
    forced_k: float  # 0: no forced playouts
    c_visit: float
    c_scale: float
    q_rescale: bool  # Gumbel's q min-max scaled over the node


class Paths(NamedTuple):
    """The leaves reserved in one step, ``L`` rows, and the path to each
    (``D``: the game's longest line)."""

    slot: np.ndarray  # [L] int64
    leaf: np.ndarray  # [L] int64: the leaf's row
    nodes: np.ndarray  # [L, D] int64: the rows on the path, root first
    actions: np.ndarray  # [L, D] int64: the action taken at each
    length: np.ndarray  # [L] int64

    @classmethod
    def empty(cls, rows: int, depth: int) -> Paths:
        return cls(np.zeros(rows, np.int64), np.zeros(rows, np.int64), np.zeros((rows, depth), np.int64),
                   np.zeros((rows, depth), np.int64), np.zeros(rows, np.int64))


@njit(cache=True)
def clear_row(tree, n):
    """Make row ``n`` a NEW node with no children."""
    tree.child[n, :] = -1
    tree.prior[n, :] = 0.0
    tree.edge_n[n, :] = 0.0
    tree.edge_w[n, :] = 0.0
    tree.legal[n, :] = False
    tree.node_kind[n] = NEW
    tree.node_value[n] = 0.0
    tree.node_n[n] = 0.0


@njit(cache=True)
def _step_down(tree, slots, g, node, a):
    """The child of ``node`` through ``a``, allocated (fresh) from slot ``g``'s
    pool when it has none yet: ``(row, fresh)``, or ``(-1, False)`` when the
    pool is full."""
    nxt = tree.child[node, a]
    if nxt >= 0:
        return nxt, False
    if slots.used[g] >= g * slots.cap + slots.cap:
        return -1, False
    nxt = slots.used[g]
    slots.used[g] += 1
    clear_row(tree, nxt)
    tree.child[node, a] = nxt
    return nxt, True


@njit(cache=True)
def _backup(tree, paths, row, depth, value, vloss):
    """Back ``value`` (from the side to move at the leaf) up one path."""
    v = value
    for i in range(depth - 1, -1, -1):
        n = paths.nodes[row, i]
        a = paths.actions[row, i]
        v = -v  # the player at n is the leaf's opponent one ply up
        tree.edge_n[n, a] += 1.0 - vloss
        tree.edge_w[n, a] += v + vloss
        tree.node_n[n] += 1.0


@njit(cache=True)
def _undo_virtual_loss(tree, paths, row, depth, vloss):
    for i in range(depth):
        n = paths.nodes[row, i]
        a = paths.actions[row, i]
        tree.edge_n[n, a] -= vloss
        tree.edge_w[n, a] += vloss


@njit(cache=True)
def select_leaves(tree, slots, searched, params, gumbel, paths):
    """Descend from the root of each slot in ``searched`` and reserve up to
    ``params.leaves_per_slot`` new leaves per slot, each move by the selection
    rule (:func:`~zeroloop.engine.search.selection.select_action`) under
    virtual loss. Terminal nodes reached on the way are backed up at once (a
    finished simulation that needs no network call); a descent that runs into
    a leaf reserved earlier in this step is a collision and is undone.

    Returns the number of reserved leaves L; rows ``[0, L)`` of ``paths``
    hold the slot, the new leaf's row and the path (node, action) to it.
    """
    n_out = 0
    vloss = params.vloss
    max_depth = paths.nodes.shape[1]
    for si in range(searched.shape[0]):
        g = searched[si]
        got = 0
        attempts = 0
        wanted = params.leaves_per_slot
        while slots.remaining[g] > 0 and got < wanted and attempts < 2 * wanted:
            attempts += 1
            node = slots.root[g]
            depth = 0
            fresh = False
            while tree.node_kind[node] == EXPANDED and depth < max_depth:
                a = select_action(tree, slots, gumbel, params, g, node, depth)
                paths.nodes[n_out, depth] = node
                paths.actions[n_out, depth] = a
                depth += 1
                tree.edge_n[node, a] += vloss
                tree.edge_w[node, a] -= vloss
                nxt, fresh = _step_down(tree, slots, g, node, a)
                if nxt < 0:
                    break
                node = nxt
                if fresh:
                    break
            if fresh:
                paths.slot[n_out] = g
                paths.leaf[n_out] = node
                paths.length[n_out] = depth
                n_out += 1
                got += 1
                slots.remaining[g] -= 1
            elif tree.node_kind[node] == TERMINAL:
                _backup(tree, paths, n_out, depth, tree.node_value[node], vloss)
                slots.remaining[g] -= 1
            else:
                # collision with a pending leaf, or the pool is full
                _undo_virtual_loss(tree, paths, n_out, depth, vloss)
                if slots.used[g] >= g * slots.cap + slots.cap:
                    slots.remaining[g] = 0
    return n_out


@njit(cache=True)
def expand_and_backup(tree, paths, params, n_leaves, terminal, values, priors, masks):
    """Store the evaluation of each leaf ``paths.leaf[i]`` (``i < n_leaves``)
    and back its value up its path.

    ``values[i]`` is from the side to move at leaf i (exact when terminal);
    ``priors[i]`` must already be masked to the legal moves and normalised.
    """
    for i in range(n_leaves):
        n = paths.leaf[i]
        tree.node_value[n] = values[i]
        if terminal[i]:
            tree.node_kind[n] = TERMINAL
        else:
            tree.node_kind[n] = EXPANDED
            tree.prior[n, :] = priors[i]
            tree.legal[n, :] = masks[i]
        _backup(tree, paths, i, paths.length[i], values[i], params.vloss)


@njit(cache=True)
def compact_subtree(tree, slots, g, new_root, order):
    """Move the subtree under ``new_root`` to the front of slot ``g``'s pool.

    Reachable rows keep their relative order (a child's row is always after
    its parent's), so copying in ascending order never overwrites a row still
    to be read. ``order[:count]`` receives the old rows in their new order.
    Returns ``count``, the subtree's size.
    """
    child, cap = tree.child, slots.cap
    start = g * cap
    remap = np.full(cap, -1, dtype=np.int64)
    stack = np.empty(cap, dtype=np.int64)
    top = 0
    stack[top] = new_root
    top += 1
    remap[new_root - start] = 0
    count = 0
    while top > 0:
        top -= 1
        n = stack[top]
        order[count] = n
        count += 1
        for a in range(child.shape[1]):
            c = child[n, a]
            if c >= 0 and remap[c - start] < 0:
                remap[c - start] = 0
                stack[top] = c
                top += 1
    order[:count].sort()
    for j in range(count):
        remap[order[j] - start] = start + j
    for j in range(count):
        old = order[j]
        new = start + j
        for a in range(child.shape[1]):
            c = child[old, a]
            child[new, a] = remap[c - start] if c >= 0 else c
        tree.prior[new, :] = tree.prior[old, :]
        tree.edge_n[new, :] = tree.edge_n[old, :]
        tree.edge_w[new, :] = tree.edge_w[old, :]
        tree.legal[new, :] = tree.legal[old, :]
        tree.node_kind[new] = tree.node_kind[old]
        tree.node_value[new] = tree.node_value[old]
        tree.node_n[new] = tree.node_n[old]
    return count
