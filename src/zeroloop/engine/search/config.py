"""Search settings, declared once (params.yaml ``mcts`` maps onto them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from zeroloop.engine.config import Annotated, at, check_fields


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """Search settings. Defaults are the shipped params.yaml's (the ablations'
    choices); each line gives the value the papers used.

    simulations: network evaluations per move (AlphaZero: 800).
    c_puct: exploration constant; ``c_init`` of the schedule when c_base is set
        (AlphaZero: c_init 1.25, c_base 19652).
    c_base: enables the visit-dependent schedule when set (None: constant c_puct).
    dirichlet_alpha, dirichlet_epsilon: root noise, used by self-play only
        (AlphaZero: alpha 0.3 chess, 0.03 Go, about 10 / typical number of
        legal moves; epsilon 0.25).
    leaves_per_game: leaves gathered per game and step, with virtual loss.
    virtual_loss: visits (counted as losses) put on a path while it is pending
        (only with leaves_per_game > 1).
    fpu: value, in [-1, 1] from the side to move, assumed for unvisited moves
        when ``fpu_reduction`` is unset. 0 reads as "a draw" at every node; the
        AlphaZero pseudocode's 0 is a loss (its values are in [0, 1]), so 0
        here is not AlphaZero's choice: -1 is.
    fpu_reduction: when set, an unvisited move's value is the node's mean value
        so far minus this times sqrt(prior mass of the visited moves) (Lc0,
        KataGo: about 0.2-0.44): the search trusts its prior where it has
        looked and assumes the rest somewhat worse than what it has seen.
    rollout_mix: lambda in V = (1 - lambda) v + lambda z, z from one random
        rollout at the leaf (AlphaGo used 0.5; 0 disables rollouts).
    reuse_tree: keep the subtree of the played move for the next search.
    algorithm: ``puct`` (AlphaZero) or ``gumbel`` (Gumbel AlphaZero, Danihelka
        et al. 2022): at the root, Gumbel-top-k sampling of
        ``max_considered_actions`` moves and sequential halving over the
        simulations; below it, deterministic selection from the improved
        policy; the improved policy (from completed Q-values, with
        ``sigma(q) = (c_visit + max N) * c_scale * q``, q mapped from [-1, 1]
        to [0, 1] as (q + 1) / 2) is the policy target and
        the halving's winner the move played. Each search starts from a fresh
        tree (``reuse_tree: false``) with one leaf per game and step.
    max_considered_actions: ``gumbel``: root moves sampled by Gumbel-top-k for
        the sequential halving.
    c_visit, c_scale: ``gumbel``: the constants of ``sigma(q) = (c_visit + max N)
        * c_scale * q``, with ``q`` mapped to [0, 1].
    gumbel_q: ``gumbel``: how ``q`` is mapped to [0, 1]: ``fixed``, from the
        game's bounds as ``(q + 1) / 2``; ``minmax``, by the node's smallest
        and largest completed Q (mctx's ``rescale_values``, with which it uses
        ``c_scale`` 0.1), so sigma spreads the moves however close their
        values are.
    forced_playouts: ``puct``, self-play only (searches with root noise;
        Gumbel's halving chooses its root visits itself and ignores it):
        KataGo's forced playouts and policy target pruning. Every root move
        gets at least ``sqrt(k * P(a) * sum N)`` visits (``k`` this value;
        KataGo uses 2), and the policy target then takes back the forced
        visits a move would not have had by PUCT (a move left with one visit
        is dropped), so the exploration does not teach the network its own
        noise. 0: off.
    """

    simulations: Annotated[int, at.Interval(ge=1, le=100_000)] = 64
    c_puct: Annotated[float, at.Interval(gt=0, le=100)] = 1.25
    c_base: Annotated[float, at.Interval(gt=0, le=1e9)] | None = None
    dirichlet_alpha: Annotated[float, at.Interval(gt=0, le=100)] = 1.0
    dirichlet_epsilon: Annotated[float, at.Interval(ge=0, le=1)] = 0.25
    leaves_per_game: Annotated[int, at.Interval(ge=1, le=64)] = 1
    virtual_loss: Annotated[float, at.Interval(ge=0, le=100)] = 1.0
    fpu: Annotated[float, at.Interval(ge=-1, le=1)] = 0.0
    fpu_reduction: Annotated[float, at.Interval(ge=0, le=2)] | None = None
    rollout_mix: Annotated[float, at.Interval(ge=0, le=1)] = 0.0
    reuse_tree: bool = True
    algorithm: Literal["puct", "gumbel"] = "puct"
    max_considered_actions: Annotated[int, at.Interval(ge=1, le=4096)] = 16
    c_visit: Annotated[float, at.Interval(ge=0, le=1e6)] = 50.0
    c_scale: Annotated[float, at.Interval(gt=0, le=1e3)] = 1.0
    gumbel_q: Literal["fixed", "minmax"] = "fixed"
    forced_playouts: Annotated[float, at.Interval(ge=0, le=100)] = 2.0

    def __post_init__(self) -> None:
        check_fields(self, "mcts")
        if self.algorithm == "gumbel" and (self.reuse_tree or self.leaves_per_game != 1):
            raise ValueError("mcts.algorithm gumbel runs its sequential halving on a fresh tree with one "
                             "leaf per game and step: set mcts.reuse_tree: false and mcts.leaves_per_game: 1 "
                             f"(got reuse_tree={self.reuse_tree}, leaves_per_game={self.leaves_per_game})")
