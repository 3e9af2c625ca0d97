"""The batched search's tree as arrays, and the numba kernels that walk it
(see :mod:`zeroloop.engine.search.tree`).

The forest is one :class:`Tree`: flat arrays, one row per node. Every game
slot owns a contiguous pool of ``cap`` rows starting at ``slot * cap``
(:class:`Slots`). Edge statistics sit on the parent's row: ``edge_n[node, a]``
visits and ``edge_w[node, a]`` summed value of action ``a`` seen from the
player to move at ``node``. The kernels take these structures (numba passes
named tuples of arrays as they are) and the search's settings as one
:class:`Params`.

Which move a simulation follows at a node is the selection rule's: PUCT or
Gumbel, two rules behind one seam, :func:`select_action`, which the descent
of :func:`select_leaves` calls at every node (as mctx plugs its
action-selection functions into one generic search). Both rules take the same
arguments: the :class:`Tree`, the :class:`Slots`, Gumbel's root state
(:class:`GumbelState`), the search's :class:`Params`, the slot ``g``, the
``node`` (a row of the tree) and its ``depth`` (0: the root); they return an
action. Values are in [-1, 1] from the side to move at the node.

- PUCT (AlphaZero): ``argmax Q(s,a) + c(s) * P(s,a) * sqrt(N(s)) / (1 + N(s,a))``
  with :func:`exploration` for ``c(s)`` and first-play urgency for unvisited
  moves; at the root of a self-play search, KataGo's forced playouts first.
- Gumbel AlphaZero (Danihelka et al., ICLR 2022): sequential halving at the
  root, below it ``argmax pi'(a) - N(a) / (1 + sum N)`` from the improved
  policy pi' of completed Q-values.

The rules live in this file with the descent on purpose: numba's on-disk cache
(``cache=True``) keys a function on its own file only, so a descent here
calling rules from another file would keep running its cached copy of the old
rules after they changed.

Node kinds: NEW (allocated, waiting for its evaluation), EXPANDED, TERMINAL.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

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
    # [S, cap] float32, the first `simulations` columns used: the visits the move simulation k picks must have
    target: np.ndarray
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


# ---------------------------------------------------------------- selection: PUCT and Gumbel

@njit(cache=True)
def select_action(tree, slots, gumbel, params, g, node, depth):
    """The seam: the action to follow from ``node``, by the rule ``params``
    names (Gumbel's, else PUCT's). The rule is a setting, not a function
    argument: numba keys a kernel that takes a function by the function's
    address, so such a kernel would never load from its cache."""
    if params.gumbel:
        return gumbel_action(tree, slots, gumbel, params, g, node, depth)
    return puct_action(tree, slots, gumbel, params, g, node, depth)


# -- PUCT --------------------------------------------------------------------------------------


@njit(cache=True)
def exploration(n_parent, c_init, c_base):
    """``c(s)`` at a node of ``n_parent`` visits: ``c_init``, or with
    ``c_base`` > 0 AlphaZero's schedule ``log((1 + N + c_base) / c_base) +
    c_init``. The one definition, for the search and for policy target
    pruning (:func:`zeroloop.engine.search.tree.pruned_visits`)."""
    c = c_init
    if c_base > 0.0:
        c = math.log((1.0 + n_parent + c_base) / c_base) + c_init
    return c


@njit(cache=True)
def puct_action(tree, slots, gumbel, params, g, node, depth):
    """PUCT's move, after KataGo's forced playouts at the root."""
    a = _forced_action(tree, node, params.forced_k) if depth == 0 else -1
    if a < 0:
        a = _best_action(tree, node, params)
    return a


@njit(cache=True)
def unvisited_value(tree, node, fpu, fpu_reduction):
    """Q of an unvisited move at ``node``: ``fpu`` when ``fpu_reduction`` < 0;
    else the node's mean value so far (its own evaluation and every visit
    below it, from the side to move there) minus ``fpu_reduction`` times the
    square root of the prior mass already visited (Lc0, KataGo)."""
    if fpu_reduction < 0.0:
        return fpu
    w, n, mass = tree.node_value[node], 1.0, 0.0
    for a in range(tree.prior.shape[1]):
        if tree.legal[node, a] and tree.edge_n[node, a] > 0.0:
            w += tree.edge_w[node, a]
            n += tree.edge_n[node, a]
            mass += tree.prior[node, a]
    return w / n - fpu_reduction * math.sqrt(mass)


@njit(cache=True)
def _best_action(tree, node, params):
    n_parent = tree.node_n[node]
    # with no visits yet, sqrt(1) lets the first choice follow the prior
    scale = exploration(n_parent, params.c_init, params.c_base) * math.sqrt(max(n_parent, 1.0))
    unvisited = unvisited_value(tree, node, params.fpu, params.fpu_reduction)
    best, best_a = -1e30, -1
    for a in range(tree.prior.shape[1]):
        if not tree.legal[node, a]:
            continue
        n = tree.edge_n[node, a]
        q = tree.edge_w[node, a] / n if n > 0.0 else unvisited
        score = q + scale * tree.prior[node, a] / (1.0 + n)
        if score > best:
            best, best_a = score, a
    return best_a


@njit(cache=True)
def _forced_action(tree, node, forced_k):
    """KataGo's forced playouts at the root: the legal move whose visits fall
    furthest below ``sqrt(forced_k * P(a) * sum N)``, or -1 when none does
    (or ``forced_k`` is 0)."""
    if forced_k <= 0.0:
        return -1
    total = 0.0
    for a in range(tree.prior.shape[1]):
        total += tree.edge_n[node, a]
    best, best_a = 0.0, -1
    for a in range(tree.prior.shape[1]):
        if tree.legal[node, a] and tree.prior[node, a] > 0.0:
            short = math.sqrt(forced_k * tree.prior[node, a] * total) - tree.edge_n[node, a]
            if short > best:
                best, best_a = short, a
    return best_a


# -- Gumbel AlphaZero --------------------------------------------------------------------------
# sigma works on q mapped to [0, 1] by (q + 1) / 2, the game's known bounds (or min-max over the node).


@njit(cache=True)
def gumbel_action(tree, slots, gumbel, params, g, node, depth):
    """Gumbel's move: sequential halving at the root (simulation ``total[g] -
    remaining[g]`` of the slot wants a considered move with ``target[g, k]``
    visits), the improved policy's deterministic choice below it."""
    if depth == 0:
        target = gumbel.target[g, gumbel.total[g] - slots.remaining[g]]
        return _halving_action(tree, node, gumbel.score[g], target, params, gumbel.q)
    return _interior_action(tree, node, params, gumbel.q, gumbel.p)


@njit(cache=True)
def completed_q(tree, node, rescale, out):
    """``out[a]``: Q of each legal move at ``node`` from the side to move, an
    unvisited one completed with v_mix, the node's value mixed with the
    prior-weighted Q of the visited moves (the paper's eq. 33). With
    ``rescale`` the legal moves' completed Qs are then min-max normalised
    over the node (as mctx's ``rescale_values``) and mapped back to [-1, 1],
    so that sigma's ``(q + 1) / 2`` sees them in [0, 1]. Returns the largest
    visit count of a move."""
    prior, edge_n, edge_w, legal = tree.prior, tree.edge_n, tree.edge_w, tree.legal
    total_n, pi_vis, weighted, max_n = 0.0, 0.0, 0.0, 0.0
    for a in range(prior.shape[1]):
        n = edge_n[node, a]
        if legal[node, a] and n > 0.0:
            total_n += n
            pi_vis += prior[node, a]
            weighted += prior[node, a] * edge_w[node, a] / n
            max_n = max(max_n, n)
    v_mix = tree.node_value[node]
    if total_n > 0.0 and pi_vis > 0.0:
        v_mix = (tree.node_value[node] + total_n * weighted / pi_vis) / (1.0 + total_n)
    for a in range(prior.shape[1]):
        n = edge_n[node, a]
        out[a] = edge_w[node, a] / n if n > 0.0 else v_mix
    if rescale:
        lo, hi = 1e30, -1e30
        for a in range(prior.shape[1]):
            if legal[node, a]:
                lo = min(lo, out[a])
                hi = max(hi, out[a])
        span = max(hi - lo, 1e-8)
        for a in range(prior.shape[1]):
            out[a] = 2.0 * (out[a] - lo) / span - 1.0
    return max_n


@njit(cache=True)
def sigma(q, max_n, c_visit, c_scale):
    """The paper's monotone transform of a completed Q (a number or an array)."""
    return (c_visit + max_n) * c_scale * 0.5 * (q + 1.0)


@njit(cache=True)
def improved_policy(tree, node, params, q_buf, out):
    """``out``: softmax(log prior + sigma(completed Q)) over the legal moves at
    ``node``; ``q_buf`` is left holding the completed Q. Returns the largest
    visit count of a move."""
    prior, legal = tree.prior, tree.legal
    max_n = completed_q(tree, node, params.q_rescale, q_buf)
    top = -1e30
    for a in range(prior.shape[1]):
        if legal[node, a] and prior[node, a] > 0.0:
            out[a] = math.log(prior[node, a]) + sigma(q_buf[a], max_n, params.c_visit, params.c_scale)
            top = max(top, out[a])
    total = 0.0
    for a in range(prior.shape[1]):
        if legal[node, a] and prior[node, a] > 0.0:
            out[a] = math.exp(out[a] - top)
            total += out[a]
        else:
            out[a] = 0.0
    for a in range(prior.shape[1]):
        out[a] /= total
    return max_n


@njit(cache=True)
def _interior_action(tree, node, params, q_buf, p_buf):
    """Deterministic selection below the root: argmax pi'(a) - N(a) / (1 + sum N)."""
    improved_policy(tree, node, params, q_buf, p_buf)
    edge_n = tree.edge_n
    total_n = 0.0
    for a in range(edge_n.shape[1]):
        total_n += edge_n[node, a]
    best, best_a = -1e30, -1
    for a in range(edge_n.shape[1]):
        if tree.legal[node, a]:
            score = p_buf[a] - edge_n[node, a] / (1.0 + total_n)
            if score > best:
                best, best_a = score, a
    return best_a


@njit(cache=True)
def _halving_action(tree, node, score, target, params, q_buf):
    """Sequential halving at the root: among the considered moves (``score``
    = Gumbel + log prior, -inf for the others) that have exactly ``target``
    visits, the one with the largest score + sigma(completed Q); the least
    visited considered move if none has (a schedule cut short)."""
    max_n = completed_q(tree, node, params.q_rescale, q_buf)
    best, best_a = -1e30, -1
    fewest, fewest_a = 1e30, -1
    for a in range(tree.prior.shape[1]):
        if score[a] <= -1e29 or not tree.legal[node, a]:
            continue
        n = tree.edge_n[node, a]
        if n == target:
            s = score[a] + sigma(q_buf[a], max_n, params.c_visit, params.c_scale)
            if s > best:
                best, best_a = s, a
        if n < fewest:
            fewest, fewest_a = n, a
    return best_a if best_a >= 0 else fewest_a


# ---------------------------------------------------------------- the tree's kernels

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
    rule (:func:`select_action`) under
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
def prune_forced(visits, q, prior, scale, forced_k, out):
    """The loop of :func:`zeroloop.engine.search.tree.pruned_visits` (its
    arithmetic in float64, as NumPy's there): ``out`` receives ``visits``
    with the forced playouts taken back."""
    actions = visits.shape[0]
    total = 0.0
    for a in range(actions):
        out[a] = visits[a]
        total += out[a]  # whole numbers: exact in any order
    if total <= 0 or forced_k <= 0:
        return
    best = 0
    for a in range(1, actions):
        if out[a] > out[best]:
            best = a
    best_score = np.float64(q[best]) + scale * np.float64(prior[best]) / (1.0 + out[best])
    for a in range(actions):
        if a == best or out[a] <= 0:
            continue
        forced = np.sqrt(forced_k * np.float64(prior[a]) * total)
        gap = best_score - np.float64(q[a])
        # the fewest visits at which this move's PUCT score is no higher than the best move's
        need = scale * np.float64(prior[a]) / gap - 1.0 if gap > 0 else np.inf
        kept = min(out[a], max(out[a] - forced, np.ceil(need)))
        out[a] = 0.0 if kept <= 1.0 else kept


@njit(cache=True)
def masked_priors(priors, masks):
    """``[B, A]`` float32 priors -> the same masked to the legal moves
    (``masks``) and normalised row by row, in float32, the sum added left to
    right; a row with nothing left on the legal moves becomes uniform over
    them. What the search keeps of an evaluator's answer."""
    n, actions = priors.shape
    out = np.empty((n, actions), np.float32)
    zero, tiny = np.float32(0.0), np.float32(1e-30)
    for i in range(n):
        total = zero
        legal = 0
        for a in range(actions):
            p = priors[i, a] if masks[i, a] else zero
            out[i, a] = p
            total += p
            legal += masks[i, a]
        if total > zero:
            total = max(total, tiny)
            for a in range(actions):
                out[i, a] = out[i, a] / total
        else:
            share = np.float32(1.0 / legal) if legal else np.float32(np.nan)
            for a in range(actions):
                out[i, a] = share if masks[i, a] else zero
    return out


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
