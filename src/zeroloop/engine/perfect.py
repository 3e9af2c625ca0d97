"""Perfect players: exhaustive negamax for tic-tac-toe, the optional
``bitbully`` solver for Connect Four, an exact endgame solver for Othello
(:mod:`zeroloop.engine.othello_endgame`, positions with at most 14 empty
squares). They label test positions
(:mod:`zeroloop.engine.positions`) and serve as the strongest opponents."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from zeroloop.engine.games import ConnectFour, Game, State, TicTacToe
from zeroloop.engine.players import PositionPlayer


class PerfectTicTacToe(PositionPlayer):
    """Exhaustive negamax: picks uniformly among the moves with the best
    result, preferring quicker wins and slower losses."""

    def __init__(self, rng: np.random.Generator, game: TicTacToe | None = None) -> None:
        self.game = game or TicTacToe()
        self.rng, self.name = rng, "perfect"

    def scores(self, state: State) -> dict[int, int]:
        """Move -> score for the side to move (>0 win, 0 draw, <0 loss)."""
        return {a: -_negamax(self.game, self.game.apply(state, a))
                for a in np.flatnonzero(self.game.legal_mask(state)).tolist()}

    def move(self, state: State) -> int:
        scores = self.scores(state)
        best = max(scores.values())
        choices = [a for a, v in scores.items() if v == best]
        return choices[int(self.rng.integers(len(choices)))]


@cache
def _negamax_cached(me: int, opp: int, ply: int, outcome: float | None) -> int:
    game = _TTT
    s = State(me, opp, ply, -1, outcome)
    if outcome is not None:
        return int(outcome) * (10 - ply)  # quicker wins score higher
    return max(-_negamax_cached(t.me, t.opp, t.ply, t.outcome)
               for t in (game.apply(s, int(a)) for a in np.flatnonzero(game.legal_mask(s))))


_TTT = TicTacToe()


def _negamax(game: TicTacToe, s: State) -> int:
    return _negamax_cached(s.me, s.opp, s.ply, s.outcome)


class PerfectConnectFour(PositionPlayer):
    """Perfect Connect Four through the optional ``bitbully`` solver (with its
    opening book); picks uniformly among the best-scoring moves."""

    def __init__(self, rng: np.random.Generator, game: ConnectFour | None = None) -> None:
        self.game = game or ConnectFour()
        self.rng, self.name = rng, "perfect"
        self._solver = connect4_solver()

    def _board(self, state: State):
        import bitbully

        occ = self.game.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        return bitbully.Board((first.astype(int) + 2 * second.astype(int)).reshape(6, 7).tolist())

    def scores(self, state: State) -> dict[int, int]:
        """Column -> solver score for the side to move (>0 win, 0 draw, <0 loss)."""
        return dict(self._solver.score_all_moves(self._board(state)))

    def value(self, state: State) -> int:
        """The position's score for the side to move: the best of :meth:`scores`,
        from one MTD(f) search instead of one per move (about 7x cheaper on the
        positions random play reaches)."""
        return int(self._solver.mtdf(self._board(state)))

    def move(self, state: State) -> int:
        scores = self.scores(state)
        best = max(scores.values())
        choices = sorted(a for a, v in scores.items() if v == best)
        return choices[int(self.rng.integers(len(choices)))]


def connect4_solver():
    """The bitbully solver, or a clear error when the extra is missing."""
    try:
        import bitbully
    except ImportError:
        raise RuntimeError(
            "the perfect Connect Four player needs the optional solver: "
            "pip install 'zeroloop[solver]' (the bitbully package)") from None
    return bitbully.BitBully()


def perfect_player(game: Game, rng: np.random.Generator) -> PositionPlayer:
    """The perfect player for ``game``; ValueError where there is none."""
    if game.name == "tictactoe":
        return PerfectTicTacToe(rng, game)
    if game.name == "connect4":
        return PerfectConnectFour(rng, game)
    raise ValueError(f"no perfect player for {game.name}")


def perfect_value(scorer: Callable[[State], dict[int, int]] | None) -> Callable[[State], int] | None:
    """The position's own score (the best move's) from the solver behind
    ``scorer``, cheaper than scoring every move, where it has one (Connect
    Four's); else None."""
    owner = getattr(scorer, "__self__", None)
    return owner.value if isinstance(owner, PerfectConnectFour) else None


def perfect_scorer(game: Game) -> Callable[[State], dict[int, int]] | None:
    """move -> score (>0 win) for the side to move, or None when no perfect player exists
    (Connect Four needs the optional ``bitbully`` solver)."""
    rng = np.random.default_rng(0)
    if game.name == "tictactoe":
        return PerfectTicTacToe(rng, game).scores
    if game.name == "connect4":
        try:
            return PerfectConnectFour(rng, game).scores
        except RuntimeError:
            return None
    if game.name.startswith("othello"):  # endgames only: positions with at most 14 empty squares
        from zeroloop.engine.othello_endgame import OthelloEndgame

        return OthelloEndgame(game).scores
    return None
