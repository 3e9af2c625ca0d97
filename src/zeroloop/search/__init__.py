"""Search: batched PUCT MCTS and the pure-UCT baseline."""

from zeroloop.search.mcts import (
    BatchedMCTS,
    Evaluator,
    MoveSchedule,
    SearchConfig,
    SearchResult,
    SearchStats,
    choose_move,
    random_rollout,
    visit_policy,
)

__all__ = [
    "BatchedMCTS", "Evaluator", "MoveSchedule", "SearchConfig", "SearchResult",
    "SearchStats", "choose_move", "random_rollout", "visit_policy",
]
