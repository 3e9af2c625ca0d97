"""``zeroloop analyse``: search positions given as move lists, one JSON answer a line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from zeroloop.engine.games import Game, IllegalMoveError, make_game
from zeroloop.engine.nn import NetworkEvaluator
from zeroloop.engine.search import BatchedMCTS, SearchConfig, search_moves
from zeroloop.pipeline.data.storage import load_or_init_net


@dataclass
class Analyser:
    """Searches one position at a time at temperature 0 with no noise."""

    game: Game
    search: BatchedMCTS

    @classmethod
    def build(cls, game_name: str, model: str | None, sims: int, seed: int = 0,
              device: str = "auto", c_puct: float | None = None) -> Analyser:
        game = make_game(game_name)
        net, game = load_or_init_net(game, model, seed)
        cfg = SearchConfig(simulations=sims, **({"c_puct": c_puct} if c_puct else {}))
        mcts = BatchedMCTS(game, NetworkEvaluator(game, net, device), cfg, 1,
                           rng=np.random.default_rng(seed))
        return cls(game, mcts)

    def analyse(self, line: str) -> dict:
        """One answer (or an ``error``) for a move sequence in game notation."""
        text = line.strip()
        g = self.game
        try:
            actions = g.parse_moves(text)
        except IllegalMoveError as exc:
            return {"moves": text, "error": str(exc)}
        state = g.initial_state()
        for i, a in enumerate(actions):
            try:
                state = g.apply(state, a)
            except IllegalMoveError as exc:
                return {"moves": text, "error": f"move {i + 1} ({g.format_action(a)}): {exc}"}
        if state.outcome is not None:
            return {"moves": text, "error": f"the game is over: {g.describe_outcome(state)}"}
        (best,), res = search_moves(self.search, [state])
        legal = np.flatnonzero(g.legal_mask(state))
        visits, q, priors = res.visits[0], res.q[0], res.priors[0]
        return {
            "moves": g.format_moves(actions),
            "move": g.format_action(best),
            "value": round(float(res.value[0]), 4),
            "visits": {g.format_action(int(a)): int(visits[a]) for a in legal},
            "q": {g.format_action(int(a)): round(float(q[a]), 4) for a in legal},
            "prior": {g.format_action(int(a)): round(float(priors[a]), 4) for a in legal},
        }

    def run(self, lines: Iterable[str], out: TextIO) -> Iterator[dict]:
        for line in lines:
            answer = self.analyse(line)
            out.write(json.dumps(answer) + "\n")
            out.flush()
            yield answer
