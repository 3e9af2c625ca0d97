"""Search: batched PUCT and Gumbel MCTS (tree, settings, the move played) and the pure-UCT baseline."""

from zeroloop.engine.search.choice import GREEDY, chosen_moves, search_moves
from zeroloop.engine.search.config import SearchConfig
from zeroloop.engine.search.moves import MoveSchedule, choose_move, visit_policy
from zeroloop.engine.search.rollout import random_rollout
from zeroloop.engine.search.tree import BatchedMCTS, Evaluator, SearchResult, SearchStats

__all__ = [
    "GREEDY", "BatchedMCTS", "Evaluator", "MoveSchedule", "SearchConfig", "SearchResult",
    "SearchStats", "choose_move", "chosen_moves", "random_rollout", "search_moves", "visit_policy",
]
