"""Which move a simulation follows at a node: PUCT or Gumbel, two rules behind
one seam, :func:`select_action`, which the descent of
:func:`zeroloop.engine.search.kernels.select_leaves` calls at every node (as
mctx plugs its action-selection functions into one generic search).

Both rules take the same arguments: the tree (``kernels.Tree``), the slots
(``kernels.Slots``), Gumbel's root state (``kernels.GumbelState``), the
search's settings (``kernels.Params``), the slot ``g``, the ``node`` (a row of
the tree) and its ``depth`` (0: the root); they return an action. Values are
in [-1, 1] from the side to move at the node.

- PUCT (AlphaZero): ``argmax Q(s,a) + c(s) * P(s,a) * sqrt(N(s)) / (1 + N(s,a))``
  with :func:`exploration` for ``c(s)`` and first-play urgency for unvisited
  moves; at the root of a self-play search, KataGo's forced playouts first.
- Gumbel AlphaZero (Danihelka et al., ICLR 2022): sequential halving at the
  root, below it ``argmax pi'(a) - N(a) / (1 + sum N)`` from the improved
  policy pi' of completed Q-values.
"""

from __future__ import annotations

import math

from numba import njit


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
