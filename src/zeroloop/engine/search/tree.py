"""Batched PUCT Monte Carlo tree search.

Many games ("slots") search together: every step descends once (or
``leaves_per_game`` times, with virtual loss) in each slot's tree, and all the
new leaves go to the evaluator in one call. Tree statistics live in the arrays
of one :class:`~zeroloop.engine.search.kernels.Tree`, updated by the numba
kernels of :mod:`zeroloop.engine.search.kernels`; the move a descent follows at
a node is the selection rule's, PUCT or Gumbel
(:func:`~zeroloop.engine.search.kernels.select_action`); game rules and the evaluator stay in
Python.

PUCT maximises ``Q(s,a) + c(s) * P(s,a) * sqrt(N(s)) / (1 + N(s,a))`` with
``Q`` from the side to move at ``s``, and ``c(s)`` either the constant
``c_puct`` or, when ``c_base`` is set, the AlphaZero schedule
``log((1 + N(s) + c_base) / c_base) + c_puct`` (``c_puct`` plays ``c_init``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from zeroloop.engine.games.base import Game, Rows, State, batched_legal_masks
from zeroloop.engine.search import kernels as K
from zeroloop.engine.search.config import SearchConfig
from zeroloop.engine.search.kernels import exploration, improved_policy, sigma
from zeroloop.engine.search.moves import considered_visits
from zeroloop.engine.search.rollout import random_rollout
from zeroloop.engine.timing import PartTimer

#: An oracle: states -> (priors ``[B, A]`` over all actions, values ``[B]`` in
#: [-1, 1] from each state's side to move). A network is one such oracle.
Evaluator = Callable[[Sequence[State]], tuple[np.ndarray, np.ndarray]]


@dataclass
class SearchStats:
    """Where search time went, in wall seconds (the coarse split of a
    :class:`~zeroloop.engine.timing.PartTimer`'s parts: ``network_s`` the
    encoding, cache, batching and network call; ``tree_s`` the tree;
    ``rules_s`` the rules), and how much work was done."""

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

    def charge(self, seconds: dict[str, float]) -> None:
        """Add a :class:`~zeroloop.engine.timing.PartTimer`'s ``seconds`` (or
        the difference of two of its readings) to the coarse split."""
        self.network_s += sum(seconds[k] for k in ("encoding", "cache", "batching", "network"))
        self.tree_s += seconds["tree"]
        self.rules_s += seconds["rules"]


def kernel_params(config: SearchConfig, *, self_play: bool) -> K.Params:
    """The kernels' settings for a search under ``config``; ``self_play``
    (a search with root noise) turns on the forced playouts."""
    leaves = config.leaves_per_game
    return K.Params(
        gumbel=config.algorithm == "gumbel", leaves_per_slot=int(leaves),
        vloss=float(config.virtual_loss) if leaves > 1 else 0.0,
        c_init=float(config.c_puct), c_base=float(config.c_base or 0.0), fpu=float(config.fpu),
        fpu_reduction=-1.0 if config.fpu_reduction is None else float(config.fpu_reduction),
        forced_k=float(config.forced_playouts) if self_play and config.algorithm == "puct" else 0.0,
        c_visit=float(config.c_visit), c_scale=float(config.c_scale), q_rescale=config.gumbel_q == "minmax")


def pruned_visits(visits: np.ndarray, q: np.ndarray, prior: np.ndarray, scale: float, forced_k: float
                  ) -> np.ndarray:
    """KataGo's policy target pruning: from each root move but the most
    visited, take back up to its forced playouts, ``sqrt(forced_k * P(a) * sum N)``,
    as long as its PUCT score (``q + scale * P / (1 + n)``, ``scale`` the
    root's ``c(s) * sqrt(N)``, :func:`root_scale`) stays at most the most
    visited move's; a move left with a single visit is dropped. The visits
    the target is built from."""
    out = np.empty(len(visits), np.float64)
    K.prune_forced(np.asarray(visits), np.asarray(q), np.asarray(prior), float(scale), float(forced_k), out)
    return out


def root_scale(n_root: np.float32, params: K.Params) -> float:
    """PUCT's ``c(s) * sqrt(N(s))`` at a root of ``n_root`` visits, for
    :func:`pruned_visits`: the search's own ``c(s)``, times the square root
    in float32 (NumPy's type for the float32 count)."""
    return exploration(n_root, params.c_init, params.c_base) * np.sqrt(max(n_root, 1.0))


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


class BatchedMCTS:
    """PUCT or Gumbel search over ``num_slots`` independent game trees.

    Use :meth:`set_root` to place a position in a slot, :meth:`search` to run
    ``config.simulations`` simulations in some slots at once, and
    :meth:`advance` after a move to keep the played subtree.

    ``timer`` is charged the search's parts (tree, rules, batching, network:
    :mod:`zeroloop.engine.timing`; a timer of its own when none is given);
    give the evaluator the same one to split the network call further.
    """

    def __init__(self, game: Game, evaluator: Evaluator, config: SearchConfig,
                 num_slots: int, *, rng: np.random.Generator,
                 pool_size: int | None = None, timer: PartTimer | None = None) -> None:
        self.game, self.evaluator, self.config = game, evaluator, config
        self._legal_masks = batched_legal_masks(game)
        self.timer = timer if timer is not None else PartTimer()
        self.num_slots = num_slots
        self.rng = rng
        # each slot draws its root noise and rollouts from its own generator (self-play gives every
        # game one, so a game does not depend on which others share the search); default: ``rng``
        self.slot_rng: list[np.random.Generator] = [rng] * num_slots
        A = game.num_actions
        # a search adds at most `simulations` nodes; room for as many reused
        self.cap = pool_size or 2 * config.simulations + 2
        rows = num_slots * self.cap
        self.tree = K.Tree.empty(rows, A)
        roots = np.arange(num_slots, dtype=np.int64) * self.cap
        self.slots = K.Slots(roots, roots + 1, np.zeros(num_slots, dtype=np.int64), self.cap)
        self.states: list[State | None] = [None] * rows
        self._noised = np.zeros(num_slots, dtype=bool)
        self._active = np.zeros(num_slots, dtype=bool)
        self._order = np.empty(self.cap, dtype=np.int64)
        # Gumbel's root state (sized 1 when the search is PUCT, which only passes it on)
        g_slots, g_len = (num_slots, self.cap) if config.algorithm == "gumbel" else (1, 1)
        self.gumbel = K.GumbelState.empty(g_slots, g_len, A)
        self.stats = SearchStats()
        self._paths = K.Paths.empty(num_slots * config.leaves_per_game, game.max_moves + 1)
        # the nodes' positions as rows of arrays, a step's leaves applied and evaluated at once, when
        # the game and the evaluator both take rows (Connect Four behind a FixedBatchEvaluator);
        # else one State per node in ``states``
        self.pos: Rows | None = None
        if (hasattr(game, "apply_rows") and getattr(evaluator, "rows", False) is True
                and hasattr(evaluator, "evaluate_rows") and config.rollout_mix == 0):
            self.pos = Rows.empty(rows)

    # -- roots --------------------------------------------------------------
    def set_root(self, slot: int, state: State, rng: np.random.Generator | None = None) -> None:
        """Start a fresh tree in ``slot`` at ``state`` (a running game); ``rng``,
        when given, becomes the slot's generator for its noise and rollouts."""
        if state.outcome is not None:
            raise ValueError("cannot search a finished game")
        root = slot * self.cap
        self.slots.root[slot] = root
        self.slots.used[slot] = root + 1
        K.clear_row(self.tree, root)
        if self.pos is None:
            self.states[root] = state
        else:
            self.pos.put(root, state)
        self._noised[slot] = False
        self._active[slot] = True
        if rng is not None:
            self.slot_rng[slot] = rng

    def root_state(self, slot: int) -> State:
        root = self.slots.root[slot]
        return self.states[root] if self.pos is None else self.pos.state(root)

    def advance(self, slot: int, action: int) -> State:
        """Play ``action`` in ``slot``; keep its subtree when reuse is on.

        Returns the new position. A finished game leaves the slot inactive.
        """
        timer = self.timer
        state = self.game.apply(self.root_state(slot), action)
        timer.lap("rules")
        if state.outcome is not None:
            self._active[slot] = False
        else:
            self._keep_subtree(slot, action, state)
        timer.lap("tree")
        return state

    def _keep_subtree(self, slot: int, action: int, state: State) -> None:
        """Make ``state``, reached by ``action``, the root of ``slot``: its
        subtree kept when reuse is on and it was expanded, else a fresh one."""
        child = self.tree.child[self.slots.root[slot], action]
        if not self.config.reuse_tree or child < 0 or self.tree.node_kind[child] != K.EXPANDED:
            self.set_root(slot, state)
            return
        start = slot * self.cap
        count = K.compact_subtree(self.tree, self.slots, slot, child, self._order)
        if self.pos is None:
            old = [self.states[i] for i in self._order[:count]]
            self.states[start:start + count] = old
        else:
            for column in self.pos:
                column[start:start + count] = column[self._order[:count]]
        self.slots.root[slot] = start
        self.slots.used[slot] = start + count
        self._noised[slot] = False
        if count + self.config.simulations > self.cap:
            self.set_root(slot, state)  # no room for a full search on top

    # -- search ---------------------------------------------------------------
    def search(self, slots: Sequence[int], *, add_noise: bool = False,
               simulations: int | None = None) -> SearchResult:
        """Run simulations in ``slots`` (all searched together).

        ``add_noise`` mixes Dirichlet noise into each root's priors (once per
        root position). ``simulations`` defaults to the config's value.
        """
        timer = self.timer
        slots_arr = np.asarray(slots, dtype=np.int64)
        sims = self.config.simulations if simulations is None else simulations
        if sims > self.cap - 1:
            raise ValueError(f"simulations={sims} exceeds this search's pool ({self.cap - 1})")
        idle = slots_arr[~self._active[slots_arr]]
        if len(idle):
            raise ValueError(f"slot {idle[0]} has no running game; call set_root first")
        for g in slots_arr[self.slots.used[slots_arr] - slots_arr * self.cap + sims > self.cap].tolist():
            self.set_root(g, self.root_state(g))  # no room left for this search: a fresh tree
        params = kernel_params(self.config, self_play=add_noise)
        timer.lap("tree")
        self._expand_new_roots(slots_arr, params)
        if params.gumbel:
            self._start_halving(slots_arr, sims, add_noise)
        elif add_noise and self.config.dirichlet_epsilon > 0:
            for g in slots_arr[~self._noised[slots_arr]].tolist():
                self._add_noise(g)
                self._noised[g] = True
        self.slots.remaining[slots_arr] = sims
        paths = self._paths
        while self.slots.remaining[slots_arr].sum() > 0:
            n = K.select_leaves(self.tree, self.slots, slots_arr, params, self.gumbel, paths)
            if n:
                parents = paths.nodes[np.arange(n), paths.length[:n] - 1]
                actions = paths.actions[np.arange(n), paths.length[:n] - 1]
                timer.lap("tree")
                self._evaluate_leaves(n, parents, actions, params)
        self.stats.simulations += sims * len(slots_arr)
        res = self._root_result(slots_arr)
        if params.gumbel:
            res = self._halving_result(slots_arr, res, params)
        elif params.forced_k > 0:  # the target without the playouts forcing put where PUCT would not have
            for j, g in enumerate(slots_arr):
                root = self.slots.root[g]
                scale = root_scale(self.tree.node_n[root], params)
                kept = pruned_visits(res.visits[j], res.q[j], self.tree.prior[root], scale, params.forced_k)
                res.policy[j] = kept / kept.sum()
        timer.lap("tree")
        return res

    def _start_halving(self, slots: np.ndarray, sims: int, add_noise: bool) -> None:
        """Gumbel AlphaZero's root (see :class:`SearchConfig`): the considered
        moves by Gumbel-top-k and the sequential halving's schedule;
        ``add_noise`` draws the Gumbel noise from each slot's generator (else
        none: the considered moves are the most likely ones)."""
        tree, gumbel = self.tree, self.gumbel
        for g in slots:
            root = self.slots.root[g]
            if tree.edge_n[root].sum() > 0:
                raise ValueError("a Gumbel search starts from a fresh root (set_root), not a searched one")
            legal = np.flatnonzero(tree.legal[root])
            logits = np.log(np.maximum(tree.prior[root, legal].astype(np.float64), 1e-30))
            noise = self.slot_rng[g].gumbel(size=len(legal)) if add_noise else np.zeros(len(legal))
            m = min(self.config.max_considered_actions, len(legal))
            top = np.argsort(-(noise + logits), kind="stable")[:m]
            gumbel.score[g] = -1e30
            gumbel.score[g, legal[top]] = (noise + logits)[top]
            gumbel.target[g, :sims] = considered_visits(m, sims)
        gumbel.total[slots] = sims

    def _halving_result(self, slots: np.ndarray, plain: SearchResult, params: K.Params) -> SearchResult:
        """Gumbel's result: the improved policy as the target, the sequential
        halving's winner as the move."""
        tree, gumbel = self.tree, self.gumbel
        policy = np.zeros((len(slots), self.game.num_actions), np.float32)
        action = np.zeros(len(slots), np.int64)
        for j, g in enumerate(slots):
            root = self.slots.root[g]
            # the improved policy, and the completed Q it leaves in gumbel.q for the final choice
            max_n = improved_policy(tree, root, params, gumbel.q, gumbel.p)
            policy[j] = gumbel.p
            considered = gumbel.score[g] > -1e29
            most = considered & (tree.edge_n[root] == tree.edge_n[root][considered].max())
            halving = gumbel.score[g] + sigma(gumbel.q, max_n, params.c_visit, params.c_scale)
            final = np.where(most, halving, -np.inf)
            action[j] = int(final.argmax())
        return SearchResult(plain.visits, plain.q, plain.value, plain.priors, policy, action)

    def _expand_new_roots(self, slots: np.ndarray, params: K.Params) -> None:
        fresh = [int(g) for g in slots if self.tree.node_kind[self.slots.root[g]] == K.NEW]
        if not fresh:
            return
        leaves = self.slots.root[fresh]
        if self.pos is None:
            priors, values, masks = self._evaluate([self.states[r] for r in leaves], fresh)
        else:
            priors, values, masks = self._evaluate(rows=leaves)
        paths = self._paths
        paths.leaf[: len(fresh)] = leaves
        paths.length[: len(fresh)] = 0
        terminal = np.zeros(len(fresh), np.bool_)
        K.expand_and_backup(self.tree, paths, params, len(fresh), terminal, values, priors, masks)
        self.timer.lap("tree")

    def _evaluate(self, states: list[State] | None = None, slots: Sequence[int] = (),
                  rows: np.ndarray | None = None):
        """Priors (masked, normalised), values and legal masks for live
        positions: ``states`` (``slots[i]``: the slot ``states[i]`` belongs to),
        or the rows ``rows`` of :attr:`pos`."""
        game, timer = self.game, self.timer
        masks = self._legal_masks(states) if rows is None else game.legal_rows(self.pos, rows)
        timer.lap("rules")
        if rows is None:
            priors, values = self.evaluator(states)
        else:
            priors, values = self.evaluator.evaluate_rows(self.pos, rows)
        timer.lap("network")
        priors = K.masked_priors(np.ascontiguousarray(priors, dtype=np.float32), masks)
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        timer.lap("batching")
        if self.config.rollout_mix > 0:  # never over rows (see __init__)
            lam = self.config.rollout_mix
            z = np.array([random_rollout(game, s, self.slot_rng[g]) for s, g in zip(states, slots)],
                         np.float32)
            values = (1 - lam) * values + lam * z
            timer.lap("rules")
        self.stats.evaluations += len(masks)
        self.stats.calls += 1
        return priors, values, masks

    def _evaluate_leaves(self, n: int, parents: np.ndarray, actions: np.ndarray, params: K.Params) -> None:
        """Evaluate the ``n`` leaves the last step reserved (``self._paths``),
        reached from ``parents`` through ``actions``, and back them up."""
        if self.pos is not None:
            self._evaluate_leaf_rows(n, parents, actions, params)
            return
        game, leaves, slot_of, timer = self.game, self._paths.leaf, self._paths.slot, self.timer
        apply, states = game.apply, self.states
        new = [apply(states[p], a) for p, a in zip(parents.tolist(), actions.tolist())]
        for leaf, s in zip(leaves[:n].tolist(), new):
            states[leaf] = s
        outcomes = [s.outcome for s in new]
        live_idx = [i for i, o in enumerate(outcomes) if o is None]
        terminal = np.array([o is not None for o in outcomes], dtype=np.bool_)
        values = np.array([0.0 if o is None else o for o in outcomes], dtype=np.float32)
        slot_list = slot_of[:n].tolist()
        live_states = [new[i] for i in live_idx]
        live_slots = [slot_list[i] for i in live_idx]
        A = game.num_actions
        priors = np.zeros((n, A), dtype=np.float32)
        masks = np.zeros((n, A), dtype=np.bool_)
        timer.lap("rules")
        if live_states:
            p, v, m = self._evaluate(live_states, live_slots)
            priors[live_idx], values[live_idx], masks[live_idx] = p, v, m
            timer.lap("batching")
        self._expand(n, params, terminal, values, priors, masks)

    def _evaluate_leaf_rows(self, n: int, parents: np.ndarray, actions: np.ndarray, params: K.Params) -> None:
        """:meth:`_evaluate_leaves` over rows: the leaves applied, checked and
        evaluated as arrays."""
        timer, leaves = self.timer, self._paths.leaf[:n]
        outcome = self.game.apply_rows(self.pos, parents, actions, leaves)
        terminal = ~np.isnan(outcome)
        live = np.flatnonzero(~terminal)
        timer.lap("rules")
        if len(live) == n:  # no game ended: every leaf evaluated
            priors, values, masks = self._evaluate(rows=leaves)
        else:
            values = np.where(terminal, outcome, np.float32(0.0))
            priors = np.zeros((n, self.game.num_actions), dtype=np.float32)
            masks = np.zeros((n, self.game.num_actions), dtype=np.bool_)
            if len(live):
                priors[live], values[live], masks[live] = self._evaluate(rows=leaves[live])
        timer.lap("batching")
        self._expand(n, params, terminal, values, priors, masks)

    def _expand(self, n: int, params: K.Params, terminal: np.ndarray, values: np.ndarray, priors: np.ndarray,
                masks: np.ndarray) -> None:
        """Store the ``n`` leaves' evaluations and back their values up."""
        K.expand_and_backup(self.tree, self._paths, params, n, terminal, values, priors, masks)
        self.timer.lap("tree")

    def _add_noise(self, slot: int) -> None:
        root, prior = self.slots.root[slot], self.tree.prior
        legal = np.flatnonzero(self.tree.legal[root])
        eps = self.config.dirichlet_epsilon
        noise = self.slot_rng[slot].dirichlet(np.full(len(legal), self.config.dirichlet_alpha))
        prior[root, legal] = (1 - eps) * prior[root, legal] + eps * noise

    def _root_result(self, slots: np.ndarray) -> SearchResult:
        roots, tree = self.slots.root[slots], self.tree
        visits = tree.edge_n[roots].copy()
        w = tree.edge_w[roots]
        q = np.divide(w, visits, out=np.zeros_like(w), where=visits > 0)
        total = visits.sum(axis=1)
        value = np.where(total > 0, row_sums(w) / np.maximum(total, 1), tree.node_value[roots])
        # the visit distribution, PUCT's policy target (visit counts are whole numbers: exact sums)
        policy = np.divide(visits, total[:, None], out=np.zeros_like(visits), where=total[:, None] > 0)
        return SearchResult(visits, q, value.astype(np.float32), tree.prior[roots].copy(), policy)
