"""Batched PUCT Monte Carlo tree search.

Many games ("slots") search together: every step descends once (or
``leaves_per_game`` times, with virtual loss) in each slot's tree, and all the
new leaves go to the evaluator in one call. Tree statistics live in flat
arrays updated by the numba kernels in :mod:`zeroloop.engine.search.kernels`; game
rules and the evaluator stay in Python.

Selection maximises ``Q(s,a) + c(s) * P(s,a) * sqrt(N(s)) / (1 + N(s,a))``
with ``Q`` from the side to move at ``s``, and ``c(s)`` either the constant
``c_puct`` or, when ``c_base`` is set, the AlphaZero schedule
``log((1 + N(s) + c_base) / c_base) + c_puct`` (``c_puct`` plays ``c_init``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from zeroloop.engine.games.base import Game, State
from zeroloop.engine.search import kernels as K
from zeroloop.engine.search.config import SearchConfig
from zeroloop.engine.search.moves import considered_visits
from zeroloop.engine.search.rollout import random_rollout

#: An oracle: states -> (priors ``[B, A]`` over all actions, values ``[B]`` in
#: [-1, 1] from each state's side to move). A network is one such oracle.
Evaluator = Callable[[Sequence[State]], tuple[np.ndarray, np.ndarray]]


@dataclass
class SearchStats:
    """Where search time went, in seconds, and how much work was done."""

    network_s: float = 0.0
    tree_s: float = 0.0
    rules_s: float = 0.0
    simulations: int = 0
    evaluations: int = 0  # positions the tree asked the evaluator for
    calls: int = 0
    cache_hits: int = 0  # of those, answered from an evaluator's cache
    network_rows: int = 0  # rows the network computed (padding of fixed batches included)

    def merge(self, other: SearchStats) -> None:
        for f in ("network_s", "tree_s", "rules_s", "simulations", "evaluations", "calls", "cache_hits",
                  "network_rows"):
            setattr(self, f, getattr(self, f) + getattr(other, f))


def pruned_visits(visits: np.ndarray, q: np.ndarray, prior: np.ndarray, scale: float, forced_k: float
                  ) -> np.ndarray:
    """KataGo's policy target pruning: from each root move but the most
    visited, take back up to its forced playouts, ``sqrt(forced_k * P(a) * sum N)``,
    as long as its PUCT score (``q + scale * P / (1 + n)``, ``scale`` the
    root's ``c * sqrt(N)``) stays at most the most visited move's; a move
    left with a single visit is dropped. The visits the target is built from."""
    out = visits.astype(np.float64).copy()
    total = float(out.sum())
    if total <= 0 or forced_k <= 0:
        return out
    best = int(out.argmax())
    best_score = q[best] + scale * prior[best] / (1.0 + out[best])
    for a in np.flatnonzero(out > 0):
        if a == best:
            continue
        forced = np.sqrt(forced_k * prior[a] * total)
        gap = best_score - q[a]
        # the fewest visits at which this move's PUCT score is no higher than the best move's
        need = scale * prior[a] / gap - 1.0 if gap > 0 else np.inf
        kept = min(out[a], max(out[a] - forced, np.ceil(need)))
        out[a] = 0.0 if kept <= 1.0 else kept
    return out


@dataclass(frozen=True)
class SearchResult:
    """Root statistics of one search, one row per searched slot.

    visits: ``[S, A]`` visit counts of the root's moves.
    q: ``[S, A]`` mean value of each root move for the side to move (0 unvisited).
    value: ``[S]`` root value for the side to move (visit-weighted mean of Q;
        the evaluator's value when no simulation ran).
    priors: ``[S, A]`` root priors used in the search (noise included).
    policy: ``[S, A]`` the policy target: the visit distribution (PUCT) or the
        improved policy from completed Q-values (Gumbel).
    action: ``[S]`` the move the search chose (Gumbel: the winner of the
        sequential halving, Gumbel noise included in self-play); None for
        PUCT, whose move a temperature schedule picks from the visits.
    """

    visits: np.ndarray
    q: np.ndarray
    value: np.ndarray
    priors: np.ndarray
    policy: np.ndarray | None = None
    action: np.ndarray | None = None


def row_sums(x: np.ndarray) -> np.ndarray:
    """``[N, A] -> [N]``, added column by column: the same bits for a row
    whatever the other rows (numpy's axis reductions may change their order of
    addition with the array's shape, and a game must not depend on which games
    share its search)."""
    out = x[:, 0].copy()
    for a in range(1, x.shape[1]):
        out += x[:, a]
    return out


@dataclass
class _Buffers:
    out_slot: np.ndarray
    out_leaf: np.ndarray
    path_nodes: np.ndarray
    path_actions: np.ndarray
    path_len: np.ndarray


class BatchedMCTS:
    """PUCT search over ``num_slots`` independent game trees.

    Use :meth:`set_root` to place a position in a slot, :meth:`search` to run
    ``config.simulations`` simulations in some slots at once, and
    :meth:`advance` after a move to keep the played subtree.
    """

    def __init__(self, game: Game, evaluator: Evaluator, config: SearchConfig,
                 num_slots: int, *, rng: np.random.Generator,
                 pool_size: int | None = None) -> None:
        self.game, self.evaluator, self.config = game, evaluator, config
        self.num_slots = num_slots
        self.rng = rng
        # each slot draws its root noise and rollouts from its own generator (self-play gives every
        # game one, so a game does not depend on which others share the search); default: ``rng``
        self.slot_rng: list[np.random.Generator] = [rng] * num_slots
        A = game.num_actions
        # a search adds at most `simulations` nodes; room for as many reused
        self.cap = pool_size or 2 * config.simulations + 2
        rows = num_slots * self.cap
        self.child = np.full((rows, A), -1, dtype=np.int64)
        self.prior = np.zeros((rows, A), dtype=np.float32)
        self.edge_n = np.zeros((rows, A), dtype=np.float32)
        self.edge_w = np.zeros((rows, A), dtype=np.float32)
        self.legal = np.zeros((rows, A), dtype=np.bool_)
        self.node_kind = np.zeros(rows, dtype=np.int8)
        self.node_value = np.zeros(rows, dtype=np.float32)
        self.node_n = np.zeros(rows, dtype=np.float32)
        self.roots = np.arange(num_slots, dtype=np.int64) * self.cap
        self.used = self.roots + 1
        self.remaining = np.zeros(num_slots, dtype=np.int64)
        self.states: list[State | None] = [None] * rows
        self._noised = np.zeros(num_slots, dtype=bool)
        self._active = np.zeros(num_slots, dtype=bool)
        self._order = np.empty(self.cap, dtype=np.int64)
        # Gumbel's root state (sized 1 when the search is PUCT, which only passes them through)
        g_slots, g_len = (num_slots, self.cap) if config.algorithm == "gumbel" else (1, 1)
        self._root_score = np.full((g_slots, A), -1e30, dtype=np.float64)
        self._visit_seq = np.zeros((g_slots, g_len), dtype=np.float32)
        self._total = np.zeros(g_slots, dtype=np.int64)
        self._qbuf, self._pbuf = np.zeros(A, np.float64), np.zeros(A, np.float64)
        self._no_gumbel = (False, self._total, self._root_score, self._visit_seq, 0.0, 1.0, False, self._qbuf,
                           self._pbuf)
        self.stats = SearchStats()
        k = num_slots * config.leaves_per_game
        depth = game.max_moves + 1
        self._buf = _Buffers(
            np.zeros(k, np.int64), np.zeros(k, np.int64),
            np.zeros((k, depth), np.int64), np.zeros((k, depth), np.int64),
            np.zeros(k, np.int64),
        )

    # -- roots --------------------------------------------------------------
    def set_root(self, slot: int, state: State, rng: np.random.Generator | None = None) -> None:
        """Start a fresh tree in ``slot`` at ``state`` (a running game); ``rng``,
        when given, becomes the slot's generator for its noise and rollouts."""
        if state.outcome is not None:
            raise ValueError("cannot search a finished game")
        root = slot * self.cap
        self.roots[slot] = root
        self.used[slot] = root + 1
        self._arrays_clear(root)
        self.states[root] = state
        self._noised[slot] = False
        self._active[slot] = True
        if rng is not None:
            self.slot_rng[slot] = rng

    def root_state(self, slot: int) -> State:
        return self.states[self.roots[slot]]

    def advance(self, slot: int, action: int) -> State:
        """Play ``action`` in ``slot``; keep its subtree when reuse is on.

        Returns the new position. A finished game leaves the slot inactive.
        """
        state = self.game.apply(self.root_state(slot), action)
        if state.outcome is not None:
            self._active[slot] = False
            return state
        child = self.child[self.roots[slot], action]
        if (not self.config.reuse_tree or child < 0
                or self.node_kind[child] != K.EXPANDED):
            self.set_root(slot, state)
            return state
        start = slot * self.cap
        count = K.compact_subtree(start, self.cap, child, self.child, self.prior,
                                  self.edge_n, self.edge_w, self.legal, self.node_kind,
                                  self.node_value, self.node_n, self._order)
        old = [self.states[i] for i in self._order[:count]]
        self.states[start:start + count] = old
        self.roots[slot] = start
        self.used[slot] = start + count
        self._noised[slot] = False
        if count + self.config.simulations > self.cap:
            self.set_root(slot, state)  # no room for a full search on top
        return state

    def _arrays_clear(self, row: int) -> None:
        self.child[row] = -1
        self.prior[row] = 0
        self.edge_n[row] = 0
        self.edge_w[row] = 0
        self.legal[row] = False
        self.node_kind[row] = K.NEW
        self.node_value[row] = 0
        self.node_n[row] = 0

    # -- search ---------------------------------------------------------------
    def search(self, slots: Sequence[int], *, add_noise: bool = False,
               simulations: int | None = None) -> SearchResult:
        """Run simulations in ``slots`` (all searched together).

        ``add_noise`` mixes Dirichlet noise into each root's priors (once per
        root position). ``simulations`` defaults to the config's value.
        """
        slots_arr = np.asarray(slots, dtype=np.int64)
        sims = self.config.simulations if simulations is None else simulations
        if sims > self.cap - 1:
            raise ValueError(f"simulations={sims} exceeds this search's pool ({self.cap - 1})")
        for g in slots_arr:
            if not self._active[g]:
                raise ValueError(f"slot {g} has no running game; call set_root first")
            if self.used[g] - g * self.cap + sims > self.cap:
                self.set_root(int(g), self.root_state(int(g)))
        self._expand_new_roots(slots_arr)
        if self.config.algorithm == "gumbel":
            return self._search_gumbel(slots_arr, sims, add_noise)
        if add_noise and self.config.dirichlet_epsilon > 0:
            for g in slots_arr:
                if not self._noised[g]:
                    self._add_noise(int(g))
                    self._noised[g] = True
        self.remaining[slots_arr] = sims
        cfg, b = self.config, self._buf
        c_base = cfg.c_base or 0.0
        vloss = cfg.virtual_loss if cfg.leaves_per_game > 1 else 0.0
        forced_k = cfg.forced_playouts if add_noise else 0.0  # self-play searches only
        while self.remaining[slots_arr].sum() > 0:
            t0 = time.perf_counter()
            n = K.select_leaves(
                slots_arr, self.roots, self.remaining, self.used, self.cap,
                cfg.leaves_per_game, self.child, self.prior, self.edge_n, self.edge_w,
                self.legal, self.node_kind, self.node_value, self.node_n,
                cfg.c_puct, c_base, cfg.fpu, -1.0 if cfg.fpu_reduction is None else cfg.fpu_reduction, vloss,
                forced_k, b.out_slot, b.out_leaf, b.path_nodes, b.path_actions, b.path_len, *self._no_gumbel)
            self.stats.tree_s += time.perf_counter() - t0
            if n:
                parents = b.path_nodes[np.arange(n), b.path_len[:n] - 1]
                actions = b.path_actions[np.arange(n), b.path_len[:n] - 1]
                self._evaluate_leaves(b.out_leaf[:n], parents, actions, vloss)
        self.stats.simulations += sims * len(slots_arr)
        res = self._root_result(slots_arr)
        if forced_k > 0:  # the policy target without the playouts forcing put where PUCT would not have
            c = cfg.c_puct
            for j, g in enumerate(slots_arr):
                root = self.roots[g]
                if c_base > 0:
                    c = np.log((1.0 + self.node_n[root] + c_base) / c_base) + cfg.c_puct
                scale = c * np.sqrt(max(self.node_n[root], 1.0))
                kept = pruned_visits(res.visits[j], res.q[j], self.prior[root], scale, forced_k)
                res.policy[j] = kept / kept.sum()
        return res

    def _search_gumbel(self, slots: np.ndarray, sims: int, add_noise: bool) -> SearchResult:
        """Gumbel AlphaZero's search (see :class:`SearchConfig`); ``add_noise``
        draws the root's Gumbel noise from each slot's generator (else none:
        the considered moves are the most likely ones)."""
        cfg, b, game = self.config, self._buf, self.game
        for g in slots:
            root = self.roots[g]
            if self.edge_n[root].sum() > 0:
                raise ValueError("a Gumbel search starts from a fresh root (set_root), not a searched one")
            legal = np.flatnonzero(self.legal[root])
            logits = np.log(np.maximum(self.prior[root, legal].astype(np.float64), 1e-30))
            noise = self.slot_rng[g].gumbel(size=len(legal)) if add_noise else np.zeros(len(legal))
            m = min(cfg.max_considered_actions, len(legal))
            top = np.argsort(-(noise + logits), kind="stable")[:m]
            self._root_score[g] = -1e30
            self._root_score[g, legal[top]] = (noise + logits)[top]
            self._visit_seq[g, :sims] = considered_visits(m, sims)
        self._total[slots] = sims
        self.remaining[slots] = sims
        rescale = cfg.gumbel_q == "minmax"
        while self.remaining[slots].sum() > 0:
            t0 = time.perf_counter()
            n = K.select_leaves(
                slots, self.roots, self.remaining, self.used, self.cap, 1, self.child, self.prior,
                self.edge_n, self.edge_w, self.legal, self.node_kind, self.node_value, self.node_n,
                cfg.c_puct, 0.0, cfg.fpu, -1.0, 0.0, 0.0, b.out_slot, b.out_leaf, b.path_nodes,
                b.path_actions, b.path_len, True, self._total, self._root_score, self._visit_seq, cfg.c_visit,
                cfg.c_scale, rescale, self._qbuf, self._pbuf)
            self.stats.tree_s += time.perf_counter() - t0
            if n:
                parents = b.path_nodes[np.arange(n), b.path_len[:n] - 1]
                actions = b.path_actions[np.arange(n), b.path_len[:n] - 1]
                self._evaluate_leaves(b.out_leaf[:n], parents, actions, 0.0)
        self.stats.simulations += sims * len(slots)
        plain = self._root_result(slots)
        A = game.num_actions
        policy, action = np.zeros((len(slots), A), np.float32), np.zeros(len(slots), np.int64)
        for j, g in enumerate(slots):
            root = self.roots[g]
            # the improved policy, and the completed Q it leaves in _qbuf for the final choice
            max_n = K.improved_policy(root, self.prior, self.edge_n, self.edge_w, self.legal, self.node_value,
                                      cfg.c_visit, cfg.c_scale, rescale, self._qbuf, self._pbuf)
            policy[j] = self._pbuf
            considered = self._root_score[g] > -1e29
            most = considered & (self.edge_n[root] == self.edge_n[root][considered].max())
            sigma = K._sigma(self._qbuf, max_n, cfg.c_visit, cfg.c_scale)
            final = np.where(most, self._root_score[g] + sigma, -np.inf)
            action[j] = int(final.argmax())
        return SearchResult(plain.visits, plain.q, plain.value, plain.priors, policy, action)

    def _expand_new_roots(self, slots: np.ndarray) -> None:
        fresh = [int(g) for g in slots if self.node_kind[self.roots[g]] == K.NEW]
        if not fresh:
            return
        leaves = self.roots[fresh]
        states = [self.states[r] for r in leaves]
        priors, values, masks = self._evaluate_states(states, fresh)
        t1 = time.perf_counter()
        b = self._buf
        b.path_len[: len(fresh)] = 0
        K.expand_and_backup(len(fresh), leaves, np.zeros(len(fresh), np.bool_), values,
                            priors, masks, b.path_nodes, b.path_actions, b.path_len,
                            self.prior, self.edge_n, self.edge_w, self.legal,
                            self.node_kind, self.node_value, self.node_n, 0.0)
        self.stats.tree_s += time.perf_counter() - t1

    def _evaluate_states(self, states: list[State], slots: Sequence[int]):
        """Priors (masked, normalised), values and legal masks for live states
        (``slots[i]``: the slot ``states[i]`` belongs to)."""
        game = self.game
        t0 = time.perf_counter()
        masks = np.stack([game.legal_mask(s) for s in states])
        t1 = time.perf_counter()
        priors, values = self.evaluator(states)
        t2 = time.perf_counter()
        priors = np.where(masks, priors, 0.0).astype(np.float32)
        total = row_sums(priors)[:, None]
        uniform = masks / masks.sum(axis=1, keepdims=True)
        priors = np.where(total > 0, priors / np.maximum(total, 1e-30), uniform).astype(np.float32)
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        if self.config.rollout_mix > 0:
            lam = self.config.rollout_mix
            z = np.array([random_rollout(game, s, self.slot_rng[g]) for s, g in zip(states, slots)],
                         np.float32)
            values = (1 - lam) * values + lam * z
        self.stats.rules_s += (t1 - t0) + (time.perf_counter() - t2)
        self.stats.network_s += t2 - t1
        self.stats.evaluations += len(states)
        self.stats.calls += 1
        return priors, values, masks

    def _evaluate_leaves(self, leaves, parents, actions, vloss) -> None:
        game, n = self.game, len(leaves)
        t0 = time.perf_counter()
        terminal = np.zeros(n, dtype=np.bool_)
        values = np.zeros(n, dtype=np.float32)
        live_idx, live_states, live_slots = [], [], []
        slot_of = self._buf.out_slot
        for i in range(n):
            s = game.apply(self.states[parents[i]], int(actions[i]))
            self.states[leaves[i]] = s
            if s.outcome is not None:
                terminal[i] = True
                values[i] = s.outcome
            else:
                live_idx.append(i)
                live_states.append(s)
                live_slots.append(int(slot_of[i]))
        A = game.num_actions
        priors = np.zeros((n, A), dtype=np.float32)
        masks = np.zeros((n, A), dtype=np.bool_)
        self.stats.rules_s += time.perf_counter() - t0
        if live_states:
            p, v, m = self._evaluate_states(live_states, live_slots)
            priors[live_idx], values[live_idx], masks[live_idx] = p, v, m
        t1 = time.perf_counter()
        b = self._buf
        K.expand_and_backup(n, leaves, terminal, values, priors, masks,
                            b.path_nodes, b.path_actions, b.path_len,
                            self.prior, self.edge_n, self.edge_w, self.legal,
                            self.node_kind, self.node_value, self.node_n, vloss)
        self.stats.tree_s += time.perf_counter() - t1

    def _add_noise(self, slot: int) -> None:
        root = self.roots[slot]
        legal = np.flatnonzero(self.legal[root])
        eps = self.config.dirichlet_epsilon
        noise = self.slot_rng[slot].dirichlet(np.full(len(legal), self.config.dirichlet_alpha))
        self.prior[root, legal] = (1 - eps) * self.prior[root, legal] + eps * noise

    def _root_result(self, slots: np.ndarray) -> SearchResult:
        roots = self.roots[slots]
        visits = self.edge_n[roots].copy()
        w = self.edge_w[roots]
        q = np.divide(w, visits, out=np.zeros_like(w), where=visits > 0)
        total = visits.sum(axis=1)
        value = np.where(total > 0, row_sums(w) / np.maximum(total, 1), self.node_value[roots])
        # the visit distribution, PUCT's policy target (visit counts are whole numbers: exact sums)
        policy = np.divide(visits, total[:, None], out=np.zeros_like(visits), where=total[:, None] > 0)
        return SearchResult(visits, q, value.astype(np.float32), self.prior[roots].copy(), policy)
