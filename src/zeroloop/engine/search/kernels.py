"""Numba kernels for the batched PUCT tree (see :mod:`zeroloop.engine.search.tree`).

The forest is a set of flat arrays, one row per node. Every game slot owns a
contiguous pool of ``cap`` rows starting at ``slot * cap``. Edge statistics sit
on the parent's row: ``edge_n[node, a]`` visits and ``edge_w[node, a]`` summed
value of action ``a`` seen from the player to move at ``node``.

Node kinds: NEW (allocated, waiting for its evaluation), EXPANDED, TERMINAL.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

NEW = 0
EXPANDED = 1
TERMINAL = 2


@njit(cache=True)
def _clear_row(n, child, prior, edge_n, edge_w, legal, node_kind, node_value, node_n):
    child[n, :] = -1
    prior[n, :] = 0.0
    edge_n[n, :] = 0.0
    edge_w[n, :] = 0.0
    legal[n, :] = False
    node_kind[n] = NEW
    node_value[n] = 0.0
    node_n[n] = 0.0


@njit(cache=True)
def _best_action(node, prior, edge_n, edge_w, legal, node_n, c_init, c_base, fpu):
    n_parent = node_n[node]
    c = c_init
    if c_base > 0.0:
        c = math.log((1.0 + n_parent + c_base) / c_base) + c_init
    # with no visits yet, sqrt(1) lets the first choice follow the prior
    scale = c * math.sqrt(max(n_parent, 1.0))
    best, best_a = -1e30, -1
    for a in range(prior.shape[1]):
        if not legal[node, a]:
            continue
        n = edge_n[node, a]
        q = edge_w[node, a] / n if n > 0.0 else fpu
        score = q + scale * prior[node, a] / (1.0 + n)
        if score > best:
            best, best_a = score, a
    return best_a


@njit(cache=True)
def _backup(row, depth, value, path_nodes, path_actions, edge_n, edge_w, node_n, vloss):
    """Back ``value`` (from the side to move at the leaf) up one path."""
    v = value
    for i in range(depth - 1, -1, -1):
        n = path_nodes[row, i]
        a = path_actions[row, i]
        v = -v  # the player at n is the leaf's opponent one ply up
        edge_n[n, a] += 1.0 - vloss
        edge_w[n, a] += v + vloss
        node_n[n] += 1.0


@njit(cache=True)
def _undo_virtual_loss(row, depth, path_nodes, path_actions, edge_n, edge_w, vloss):
    for i in range(depth):
        n = path_nodes[row, i]
        a = path_actions[row, i]
        edge_n[n, a] -= vloss
        edge_w[n, a] += vloss


@njit(cache=True)
def select_leaves(slots, roots, remaining, used, cap, leaves_per_slot,
                  child, prior, edge_n, edge_w, legal, node_kind, node_value, node_n,
                  c_init, c_base, fpu, vloss,
                  out_slot, out_leaf, path_nodes, path_actions, path_len):
    """Descend from each slot's root and reserve up to ``leaves_per_slot`` new
    leaves per slot. Terminal nodes reached on the way are backed up at once
    (a finished simulation that needs no network call); a descent that runs
    into a leaf reserved earlier in this step is a collision and is undone.

    Returns the number of reserved leaves L; rows ``[0, L)`` of the outputs
    hold the slot, the new leaf's row and the path (node, action) to it.
    """
    n_out = 0
    max_depth = path_nodes.shape[1]
    for si in range(slots.shape[0]):
        g = slots[si]
        got = 0
        attempts = 0
        pool_end = g * cap + cap
        while remaining[g] > 0 and got < leaves_per_slot and attempts < 2 * leaves_per_slot:
            attempts += 1
            node = roots[g]
            depth = 0
            fresh = False
            while node_kind[node] == EXPANDED and depth < max_depth:
                a = _best_action(node, prior, edge_n, edge_w, legal, node_n, c_init, c_base, fpu)
                path_nodes[n_out, depth] = node
                path_actions[n_out, depth] = a
                depth += 1
                edge_n[node, a] += vloss
                edge_w[node, a] -= vloss
                nxt = child[node, a]
                if nxt < 0:
                    if used[g] >= pool_end:
                        break
                    nxt = used[g]
                    used[g] += 1
                    _clear_row(nxt, child, prior, edge_n, edge_w, legal, node_kind, node_value, node_n)
                    child[node, a] = nxt
                    fresh = True
                node = nxt
                if fresh:
                    break
            if fresh:
                out_slot[n_out] = g
                out_leaf[n_out] = node
                path_len[n_out] = depth
                n_out += 1
                got += 1
                remaining[g] -= 1
            elif node_kind[node] == TERMINAL:
                _backup(n_out, depth, node_value[node], path_nodes, path_actions,
                        edge_n, edge_w, node_n, vloss)
                remaining[g] -= 1
            else:
                # collision with a pending leaf, or the pool is full
                _undo_virtual_loss(n_out, depth, path_nodes, path_actions, edge_n, edge_w, vloss)
                if used[g] >= pool_end:
                    remaining[g] = 0
    return n_out


@njit(cache=True)
def expand_and_backup(n_leaves, leaves, terminal, values, priors, masks,
                      path_nodes, path_actions, path_len,
                      prior, edge_n, edge_w, legal, node_kind, node_value, node_n, vloss):
    """Store each leaf's evaluation and back its value up its path.

    ``values[i]`` is from the side to move at leaf i (exact when terminal);
    ``priors[i]`` must already be masked to the legal moves and normalised.
    """
    for i in range(n_leaves):
        n = leaves[i]
        node_value[n] = values[i]
        if terminal[i]:
            node_kind[n] = TERMINAL
        else:
            node_kind[n] = EXPANDED
            prior[n, :] = priors[i]
            legal[n, :] = masks[i]
        _backup(i, path_len[i], values[i], path_nodes, path_actions, edge_n, edge_w, node_n, vloss)


@njit(cache=True)
def compact_subtree(start, cap, new_root, child, prior, edge_n, edge_w, legal,
                    node_kind, node_value, node_n, order):
    """Move the subtree under ``new_root`` to the front of its pool.

    Reachable rows keep their relative order (a child's row is always after
    its parent's), so copying in ascending order never overwrites a row still
    to be read. ``order[:count]`` receives the old rows in their new order.
    Returns ``count``, the subtree's size.
    """
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
        prior[new, :] = prior[old, :]
        edge_n[new, :] = edge_n[old, :]
        edge_w[new, :] = edge_w[old, :]
        legal[new, :] = legal[old, :]
        node_kind[new] = node_kind[old]
        node_value[new] = node_value[old]
        node_n[new] = node_n[old]
    return count
