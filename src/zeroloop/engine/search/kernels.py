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
def _unvisited_value(node, prior, edge_n, edge_w, legal, node_value, fpu, fpu_reduction):
    """Q of an unvisited move at ``node``: ``fpu`` when ``fpu_reduction`` < 0;
    else the node's mean value so far (its own evaluation and every visit
    below it, from the side to move there) minus ``fpu_reduction`` times the
    square root of the prior mass already visited (Lc0, KataGo)."""
    if fpu_reduction < 0.0:
        return fpu
    w, n, mass = node_value[node], 1.0, 0.0
    for a in range(prior.shape[1]):
        if legal[node, a] and edge_n[node, a] > 0.0:
            w += edge_w[node, a]
            n += edge_n[node, a]
            mass += prior[node, a]
    return w / n - fpu_reduction * math.sqrt(mass)


@njit(cache=True)
def _best_action(node, prior, edge_n, edge_w, legal, node_n, node_value, c_init, c_base, fpu,
                 fpu_reduction):
    n_parent = node_n[node]
    c = c_init
    if c_base > 0.0:
        c = math.log((1.0 + n_parent + c_base) / c_base) + c_init
    # with no visits yet, sqrt(1) lets the first choice follow the prior
    scale = c * math.sqrt(max(n_parent, 1.0))
    unvisited = _unvisited_value(node, prior, edge_n, edge_w, legal, node_value, fpu, fpu_reduction)
    best, best_a = -1e30, -1
    for a in range(prior.shape[1]):
        if not legal[node, a]:
            continue
        n = edge_n[node, a]
        q = edge_w[node, a] / n if n > 0.0 else unvisited
        score = q + scale * prior[node, a] / (1.0 + n)
        if score > best:
            best, best_a = score, a
    return best_a


@njit(cache=True)
def _forced_action(node, prior, edge_n, legal, forced_k):
    """KataGo's forced playouts at the root: the legal move whose visits fall
    furthest below ``sqrt(forced_k * P(a) * sum N)``, or -1 when none does
    (or ``forced_k`` is 0)."""
    if forced_k <= 0.0:
        return -1
    total = 0.0
    for a in range(prior.shape[1]):
        total += edge_n[node, a]
    best, best_a = 0.0, -1
    for a in range(prior.shape[1]):
        if legal[node, a] and prior[node, a] > 0.0:
            short = math.sqrt(forced_k * prior[node, a] * total) - edge_n[node, a]
            if short > best:
                best, best_a = short, a
    return best_a


@njit(cache=True)
def _step_down(node, a, g, pool_end, used, child, prior, edge_n, edge_w, legal, node_kind, node_value,
               node_n):
    """The child of ``node`` through ``a``, allocated (fresh) from slot ``g``'s
    pool when it has none yet: ``(row, fresh)``, or ``(-1, False)`` when the
    pool is full."""
    nxt = child[node, a]
    if nxt >= 0:
        return nxt, False
    if used[g] >= pool_end:
        return -1, False
    nxt = used[g]
    used[g] += 1
    _clear_row(nxt, child, prior, edge_n, edge_w, legal, node_kind, node_value, node_n)
    child[node, a] = nxt
    return nxt, True


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
                  c_init, c_base, fpu, fpu_reduction, vloss, forced_k,
                  out_slot, out_leaf, path_nodes, path_actions, path_len,
                  gumbel, total, root_score, visit_seq, c_visit, c_scale, q_rescale, q_buf, p_buf):
    """Descend from each slot's root and reserve up to ``leaves_per_slot`` new
    leaves per slot. Terminal nodes reached on the way are backed up at once
    (a finished simulation that needs no network call); a descent that runs
    into a leaf reserved earlier in this step is a collision and is undone.

    Moves are chosen by PUCT, or with ``gumbel`` the Gumbel way (one leaf per
    slot, no virtual loss): at the root by sequential halving (simulation
    ``total[g] - remaining[g]`` of the slot wants a considered move with
    ``visit_seq[g, k]`` visits; ``root_score`` holds Gumbel + log prior of the
    considered moves), below it deterministically from the improved policy.

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
                if not gumbel:
                    a = _forced_action(node, prior, edge_n, legal, forced_k) if depth == 0 else -1
                    if a < 0:
                        a = _best_action(node, prior, edge_n, edge_w, legal, node_n, node_value, c_init,
                                         c_base, fpu, fpu_reduction)
                elif depth == 0:
                    a = _gumbel_root_action(node, root_score[g], visit_seq[g, total[g] - remaining[g]], prior,
                                            edge_n, edge_w, legal, node_value, c_visit, c_scale, q_rescale,
                                            q_buf)
                else:
                    a = _gumbel_interior_action(node, prior, edge_n, edge_w, legal, node_value, c_visit,
                                                c_scale, q_rescale, q_buf, p_buf)
                path_nodes[n_out, depth] = node
                path_actions[n_out, depth] = a
                depth += 1
                edge_n[node, a] += vloss
                edge_w[node, a] -= vloss
                nxt, fresh = _step_down(node, a, g, pool_end, used, child, prior, edge_n, edge_w, legal,
                                        node_kind, node_value, node_n)
                if nxt < 0:
                    break
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


# -- Gumbel AlphaZero (Danihelka et al., ICLR 2022) --------------------------------------------
# Values are in [-1, 1]; sigma works on q mapped to [0, 1] by (q + 1) / 2, the game's known bounds.


@njit(cache=True)
def _completed_q(node, prior, edge_n, edge_w, legal, node_value, rescale, out):
    """``out[a]``: Q of each legal move at ``node`` from the side to move, an
    unvisited one completed with v_mix, the node's value mixed with the
    prior-weighted Q of the visited moves (the paper's eq. 33). With
    ``rescale`` the legal moves' completed Qs are then min-max normalised
    over the node (as mctx's ``rescale_values``) and mapped back to [-1, 1],
    so that sigma's ``(q + 1) / 2`` sees them in [0, 1]. Returns the largest
    visit count of a move."""
    total_n, pi_vis, weighted, max_n = 0.0, 0.0, 0.0, 0.0
    for a in range(prior.shape[1]):
        n = edge_n[node, a]
        if legal[node, a] and n > 0.0:
            total_n += n
            pi_vis += prior[node, a]
            weighted += prior[node, a] * edge_w[node, a] / n
            max_n = max(max_n, n)
    v_mix = node_value[node]
    if total_n > 0.0 and pi_vis > 0.0:
        v_mix = (node_value[node] + total_n * weighted / pi_vis) / (1.0 + total_n)
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
def _sigma(q, max_n, c_visit, c_scale):
    """The paper's monotone transform of a completed Q."""
    return (c_visit + max_n) * c_scale * 0.5 * (q + 1.0)


@njit(cache=True)
def improved_policy(node, prior, edge_n, edge_w, legal, node_value, c_visit, c_scale, q_rescale, q_buf, out):
    """``out``: softmax(log prior + sigma(completed Q)) over the legal moves at
    ``node``; ``q_buf`` is left holding the completed Q. Returns the largest
    visit count of a move."""
    max_n = _completed_q(node, prior, edge_n, edge_w, legal, node_value, q_rescale, q_buf)
    top = -1e30
    for a in range(prior.shape[1]):
        if legal[node, a] and prior[node, a] > 0.0:
            out[a] = math.log(prior[node, a]) + _sigma(q_buf[a], max_n, c_visit, c_scale)
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
def _gumbel_interior_action(node, prior, edge_n, edge_w, legal, node_value, c_visit, c_scale, q_rescale,
                            q_buf, p_buf):
    """Deterministic selection below the root: argmax pi'(a) - N(a) / (1 + sum N)."""
    improved_policy(node, prior, edge_n, edge_w, legal, node_value, c_visit, c_scale, q_rescale, q_buf, p_buf)
    total_n = 0.0
    for a in range(prior.shape[1]):
        total_n += edge_n[node, a]
    best, best_a = -1e30, -1
    for a in range(prior.shape[1]):
        if legal[node, a]:
            score = p_buf[a] - edge_n[node, a] / (1.0 + total_n)
            if score > best:
                best, best_a = score, a
    return best_a


@njit(cache=True)
def _gumbel_root_action(node, score, target, prior, edge_n, edge_w, legal, node_value, c_visit, c_scale,
                        q_rescale, q_buf):
    """Sequential halving at the root: among the considered moves (``score``
    = Gumbel + log prior, -inf for the others) that have exactly ``target``
    visits, the one with the largest score + sigma(completed Q); the least
    visited considered move if none has (a schedule cut short)."""
    max_n = _completed_q(node, prior, edge_n, edge_w, legal, node_value, q_rescale, q_buf)
    best, best_a = -1e30, -1
    fewest, fewest_a = 1e30, -1
    for a in range(prior.shape[1]):
        if score[a] <= -1e29 or not legal[node, a]:
            continue
        n = edge_n[node, a]
        if n == target:
            s = score[a] + _sigma(q_buf[a], max_n, c_visit, c_scale)
            if s > best:
                best, best_a = s, a
        if n < fewest:
            fewest, fewest_a = n, a
    return best_a if best_a >= 0 else fewest_a
