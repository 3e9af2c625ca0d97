"""Positions given as move lists, searched one at a time: what ``zeroloop
analyse`` prints a line for and what the registered champion's MLflow model
answers (:mod:`zeroloop.pipeline.tracking.champion_model`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import TextIO

import numpy as np

from zeroloop.engine.games import Game, IllegalMoveError, State, make_game
from zeroloop.engine.nn import NetworkEvaluator
from zeroloop.engine.search import BatchedMCTS, SearchConfig, search_moves
from zeroloop.pipeline.data.storage import load_or_init_net

#: searches kept for other simulation counts than the configured one (each holds a tree of its size)
KEPT_SEARCHES = 4


class Analyser:
    """Searches one position at a time at temperature 0 with no noise, with
    ``config`` (its ``simulations`` unless a call asks for another count)."""

    def __init__(self, game: Game, evaluator: NetworkEvaluator, config: SearchConfig, seed: int = 0) -> None:
        self.game, self.evaluator, self.config, self.seed = game, evaluator, config, seed
        self._searches: dict[int, BatchedMCTS] = {}

    @classmethod
    def build(cls, game_name: str, model: str | None, sims: int, seed: int = 0,
              device: str = "auto", c_puct: float | None = None) -> Analyser:
        cfg = SearchConfig(simulations=sims, **({"c_puct": c_puct} if c_puct else {}))
        return cls.for_model(game_name, model, cfg, seed, device)

    @classmethod
    def for_model(cls, game_name: str, model: str | None, config: SearchConfig, seed: int = 0,
                  device: str = "auto", precision: str = "fp32") -> Analyser:
        """The model file's net (a random one, seeded, without a file) searched
        with ``config``, run on ``device`` in ``precision`` (``runtime.precision``)."""
        net, game = load_or_init_net(make_game(game_name), model, seed)
        return cls(game, NetworkEvaluator(game, net, device, precision=precision), config, seed)

    def search(self, simulations: int | None = None) -> BatchedMCTS:
        """The one-slot search at ``simulations`` (default: the config's); a
        bad count raises ``ValueError`` naming it."""
        n = self.config.simulations if simulations is None else simulations
        if n not in self._searches:
            try:
                cfg = replace(self.config, simulations=n)
            except ValueError as exc:
                raise ValueError(str(exc).removeprefix("mcts.")) from None
            if len(self._searches) >= KEPT_SEARCHES:
                del self._searches[next(k for k in self._searches if k != self.config.simulations)]
            self._searches[n] = BatchedMCTS(self.game, self.evaluator, cfg, 1,
                                            rng=np.random.default_rng(self.seed))
        return self._searches[n]

    def position(self, text: str) -> tuple[list[int], State]:
        """The moves of ``text`` (the game's notation, from the start) and the
        position they reach; ``ValueError`` says what is wrong: a malformed or
        illegal move (which one), or a game already over."""
        g = self.game
        actions = g.parse_moves(text.strip())
        state = g.initial_state()
        for i, a in enumerate(actions):
            try:
                state = g.apply(state, a)
            except IllegalMoveError as exc:
                raise IllegalMoveError(f"move {i + 1} ({g.format_action(a)}): {exc}") from None
        if state.outcome is not None:
            raise ValueError(f"the game is over: {g.describe_outcome(state)}")
        return actions, state

    def analyse(self, line: str, simulations: int | None = None) -> dict:
        """One answer (or an ``error``) for a move sequence in game notation:
        the move searched, the value for the side to move (-1..1) and, per
        legal move, its visits, mean value ``q``, prior and share of the
        search's ``policy`` (the visit distribution; Gumbel: the improved
        policy)."""
        text = line.strip()
        g = self.game
        try:
            actions, state = self.position(text)
            mcts = self.search(simulations)
        except ValueError as exc:
            return {"moves": text, "error": str(exc)}
        (best,), res = search_moves(mcts, [state])
        legal = np.flatnonzero(g.legal_mask(state))
        visits, q, priors, policy = res.visits[0], res.q[0], res.priors[0], res.policy[0]
        return {
            "moves": g.format_moves(actions),
            "move": g.format_action(best),
            "value": round(float(res.value[0]), 4),
            "visits": {g.format_action(int(a)): int(visits[a]) for a in legal},
            "q": {g.format_action(int(a)): round(float(q[a]), 4) for a in legal},
            "prior": {g.format_action(int(a)): round(float(priors[a]), 4) for a in legal},
            "policy": {g.format_action(int(a)): round(float(policy[a]), 4) for a in legal},
        }

    def run(self, lines: Iterable[str], out: TextIO) -> Iterator[dict]:
        for line in lines:
            answer = self.analyse(line)
            out.write(json.dumps(answer) + "\n")
            out.flush()
            yield answer
