"""Playing against a model: which models there are for a game, and a play
session (human moves, AI moves with their search statistics, undo) shared by
``zeroloop play`` (terminal) and ``zeroloop serve`` (browser)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zeroloop.engine.games import Game, IllegalMoveError, State, make_game
from zeroloop.engine.games.base import NUM_PLANES
from zeroloop.engine.search import chosen_moves
from zeroloop.pipeline.data.catalogue import ModelInfo, damaged_model, list_models
from zeroloop.pipeline.data.storage import DamagedFileError, read_model_header


class PlayError(ValueError):
    """A request the session refuses; ``status`` is the HTTP status it maps to."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def resolve_model(game: Game, model: str | None, root: str | Path = ".", allow_paths: bool = True
                  ) -> ModelInfo:
    """A model id from :func:`list_models` or (``allow_paths``) a file path;
    ``None``: the first listed."""
    models = list_models(game, root)
    if model is None:
        return models[0]
    for m in models:
        if m.id == model:
            return m
    path = Path(model)
    if allow_paths and (path.suffix == ".pt" or path.exists()):
        if not path.is_file():
            raise PlayError(f"{model}: no such model file", 404)
        try:
            found = read_model_header(path)["game"]
        except DamagedFileError as exc:
            raise PlayError(str(exc), 400) from None
        if found != game.name:
            raise PlayError(f"{model}: model is for {found!r}, not {game.name!r}", 400)
        return ModelInfo(path.name, str(path), str(path))
    if damage := damaged_model(game, model, root):
        raise PlayError(f"model {model!r} is damaged: {damage}", 400)
    ids = ", ".join(m.id for m in models)
    hint = " (or a .pt file)" if allow_paths else ""
    raise PlayError(f"unknown model {model!r} for {game.name}; choose one of: {ids}{hint}", 404)


class NetCache:
    """Loaded networks by (path, mtime), so a server loads each file once."""

    def __init__(self, device: str = "auto") -> None:
        self.device = device
        self._nets: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def evaluator(self, game: Game, info: ModelInfo, seed: int = 0):
        from zeroloop.engine.nn import NetworkEvaluator
        from zeroloop.pipeline.data.storage import load_or_init_net

        key = (game.name, info.path, Path(info.path).stat().st_mtime_ns if info.path else seed)
        with self._lock:
            if key not in self._nets:
                net, _ = load_or_init_net(game, info.path, seed)
                self._nets[key] = NetworkEvaluator(game, net, self.device)
            return self._nets[key]


def _planes(game: Game, state: State) -> np.ndarray:
    """``[4, H * W]``: the Game protocol's first four input planes (the
    mover's stones, the opponent's, the last move, colour), which every game
    provides."""
    return game.encode([state])[0][:NUM_PLANES].reshape(NUM_PLANES, -1)


def last_move_cell(game: Game, state: State) -> int | None:
    """The cell the last move filled, or None (no move yet, or a pass)."""
    last = np.flatnonzero(_planes(game, state)[2])
    return int(last[0]) if len(last) else None


def move_cell(game: Game, state: State, action: int) -> int | None:
    """The cell a legal move fills (Connect Four: where the disc lands), or None for a pass."""
    return last_move_cell(game, game.apply(state, action))


def _last_or_minus_one(game: Game, state: State) -> int:
    cell = last_move_cell(game, state)
    return -1 if cell is None else cell


def board_view(game: Game, state: State) -> dict[str, Any]:
    """The position as the page draws it: cells row by row from the top
    (0 empty, 1 the first player's stone 'X', 2 the second's 'O'), the last
    move's cell, and the legal moves with the cell each one fills."""
    # from the planes, not the bitboards, so a game written from the protocol alone is drawn too
    mine, theirs = _planes(game, state)[:2] > 0
    first, second = (mine, theirs) if state.first_to_move else (theirs, mine)
    cells = (first.astype(int) + 2 * second.astype(int)).tolist()
    legal = []
    if state.outcome is None:
        legal = [{"move": game.format_action(int(a)), "cell": move_cell(game, state, int(a))}
                 for a in np.flatnonzero(game.legal_mask(state))]
    return {"rows": game.rows, "cols": game.cols, "cells": cells, "last": _last_or_minus_one(game, state),
            "to_move": "X" if state.first_to_move else "O", "legal": legal,
            "over": state.outcome is not None,
            "result": game.describe_outcome(state) if state.outcome is not None else None}


#: Simulations between two checks for a cancelled search.
SEARCH_CHUNK = 256


def searched_move(game: Game, evaluator, state: State, sims: int, rng: np.random.Generator,
                  cancel: threading.Event | None = None):
    """The move a model plays in ``state``: ``sims`` simulations of PUCT
    (no noise), then the most-visited move, as matches play; with the
    search's result (visits, values). The search runs in chunks of
    :data:`SEARCH_CHUNK` simulations (the same tree as one call); when
    ``cancel`` is set between two chunks it stops with a 499 PlayError."""
    from zeroloop.engine.search import BatchedMCTS, SearchConfig

    search = BatchedMCTS(game, evaluator, SearchConfig(simulations=sims), 1, rng=rng)
    search.set_root(0, state)
    done = 0
    while done < sims:
        if cancel is not None and cancel.is_set():
            raise PlayError("the search was cancelled (the client went away)", 499)
        n = min(SEARCH_CHUNK, sims - done)
        res = search.search([0], simulations=n)
        done += n
    del search  # the tree: up to ~30 MB at 20000 simulations in Othello
    (best,) = chosen_moves(res, [state.ply])
    return best, res


@dataclass
class PlaySession:
    """One game of a human against a searching model (temperature 0, no noise)."""

    game: Game
    model: ModelInfo
    sims: int
    human_first: bool
    evaluator: Any
    seed: int = 0
    states: list[State] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    ai_info: dict[int, dict[str, Any]] = field(default_factory=dict)  # ply -> the AI's search stats
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not self.states:
            self.states = [self.game.initial_state()]
        # the search tree is built for each AI move and dropped after it: an idle game holds no tree
        self.rng = np.random.default_rng(self.seed)

    @property
    def state(self) -> State:
        return self.states[-1]

    @property
    def over(self) -> bool:
        return self.state.outcome is not None

    @property
    def human_to_move(self) -> bool:
        return not self.over and self.state.first_to_move == self.human_first

    @property
    def human_side(self) -> str:
        return "X" if self.human_first else "O"

    def _check_running(self) -> None:
        if self.over:
            raise PlayError(f"the game is over ({self.game.describe_outcome(self.state)}); "
                            "start a new game or undo", 409)

    def human_move(self, text: str) -> int:
        """Play the human's move given in the game's notation."""
        self._check_running()
        if not self.human_to_move:
            raise PlayError("it is the AI's turn, not yours", 409)
        if not isinstance(text, str) or not text.strip():
            raise PlayError("empty move")
        try:
            action = self.game.parse_action(text.strip())
            new = self.game.apply(self.state, action)
        except IllegalMoveError as exc:
            raise PlayError(f"illegal move {text.strip()!r}: {exc}") from None
        self.states.append(new)
        self.actions.append(action)
        return action

    def ai_move(self, cancel: threading.Event | None = None) -> dict[str, Any]:
        """Search, play the most-visited move, and return what the search saw:
        the value for the AI (-1..1) and the visit share of each legal move.
        A cancelled search (:func:`searched_move`) plays no move."""
        self._check_running()
        if self.human_to_move:
            raise PlayError("it is your turn, not the AI's", 409)
        g, state = self.game, self.state
        best, res = searched_move(g, self.evaluator, state, self.sims, self.rng, cancel)
        legal = np.flatnonzero(g.legal_mask(state))
        visits, q = res.visits[0], res.q[0]
        total = float(visits[legal].sum()) or 1.0
        info = {
            "move": g.format_action(best),
            "cell": move_cell(g, state, best),
            "value": round(float(res.value[0]), 4),
            "visits": sorted(({"move": g.format_action(int(a)), "share": round(float(visits[a]) / total, 4),
                               "visits": int(visits[a]), "q": round(float(q[a]), 4),
                               "cell": move_cell(g, state, int(a))} for a in legal),
                             key=lambda d: -d["visits"]),
        }
        self.ai_info[len(self.actions)] = info
        self.states.append(g.apply(state, best))
        self.actions.append(best)
        return info

    def undo(self) -> None:
        """Take back moves up to and including the human's last move."""
        human_plies = [i for i in range(len(self.actions)) if (i % 2 == 0) == self.human_first]
        if not human_plies:
            raise PlayError("nothing to undo: you have not moved yet", 409)
        keep = human_plies[-1]
        del self.states[keep + 1:]
        del self.actions[keep:]
        for ply in [p for p in self.ai_info if p >= keep]:
            del self.ai_info[ply]

    def view(self) -> dict[str, Any]:
        board = board_view(self.game, self.state)
        last_ai = self.ai_info.get(len(self.actions) - 1)
        result = None
        if self.over:
            z = self.state.outcome if self.state.first_to_move else -self.state.outcome  # for X
            human = z if self.human_first else -z
            result = "draw" if human == 0 else ("you win" if human > 0 else "the AI wins")
        return {**board, "game": self.game.name, "model": self.model.as_dict(), "sims": self.sims,
                "human": self.human_side, "your_turn": self.human_to_move,
                "moves": [self.game.format_action(a) for a in self.actions],
                "last_ai": last_ai, "outcome": result}


def new_session(game_name: str, model: str | None = None, *, sims: int = 200, human_first: bool = True,
                root: str | Path = ".", nets: NetCache | None = None, seed: int = 0,
                allow_paths: bool = True) -> PlaySession:
    try:
        game = make_game(game_name)
    except ValueError as exc:
        raise PlayError(str(exc), 404) from None
    if not 1 <= sims <= 100_000:
        raise PlayError(f"sims={sims} must be between 1 and 100000")
    info = resolve_model(game, model, root, allow_paths)
    evaluator = (nets or NetCache()).evaluator(game, info, seed)
    return PlaySession(game, info, sims, human_first, evaluator, seed)


def play_terminal(session: PlaySession, inp, out) -> int:
    """The terminal game: board, prompt, the AI's move with its value and
    visit shares, and the result. Lines: a move in the game's notation,
    ``undo``, ``hint`` (the legal moves) or ``quit``."""
    g = session.game

    def say(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    say(f"{g.name}: you play {session.human_side}, the AI plays {'O' if session.human_first else 'X'} "
        f"({session.model.label}, {session.sims} simulations per move).")
    say("Type a move (e.g. " + ", ".join(m["move"] for m in board_view(g, session.state)["legal"][:3])
        + "), 'undo', 'hint' or 'quit'.")
    while True:
        if session.over:
            say(g.render(session.state))
            say(f"Game over: {g.describe_outcome(session.state)} ({session.view()['outcome']}).")
            return 0
        if not session.human_to_move:
            info = session.ai_move()
            top = ", ".join(f"{v['move']} {100 * v['share']:.0f}%" for v in info["visits"][:5])
            say(f"AI plays {info['move']}: value {info['value']:+.2f} for the AI "
                f"(expected score {50 * (info['value'] + 1):.0f}%); visits: {top}")
            continue
        say(g.render(session.state))
        out.write(f"Your move ({session.human_side}): ")
        out.flush()
        line = inp.readline()
        if not line:
            say("")
            say("Input ended; game abandoned.")
            return 1
        text = line.strip()
        if text.lower() in ("quit", "exit", "q"):
            say("Game abandoned.")
            return 1
        if text.lower() == "hint":
            say("Legal moves: " + " ".join(m["move"] for m in board_view(g, session.state)["legal"]))
            continue
        try:
            if text.lower() == "undo":
                session.undo()
                say("Took back your last move.")
            else:
                session.human_move(text)
        except PlayError as exc:
            say(f"{exc}. Try again.")
