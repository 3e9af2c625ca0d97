"""Search: batched PUCT MCTS (tree, settings, move choice) and the pure-UCT baseline."""

from zeroloop.engine.search.config import SearchConfig
from zeroloop.engine.search.moves import MoveSchedule, choose_move, visit_policy
from zeroloop.engine.search.rollout import random_rollout
from zeroloop.engine.search.tree import BatchedMCTS, Evaluator, SearchResult, SearchStats

__all__ = [
    "BatchedMCTS", "Evaluator", "MoveSchedule", "SearchConfig", "SearchResult",
    "SearchStats", "choose_move", "random_rollout", "visit_policy",
]
