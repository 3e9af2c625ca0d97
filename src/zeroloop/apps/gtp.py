"""``zeroloop gtp``: a model as a Go engine speaking the Go Text Protocol
(GTP 2) on standard input and output, for GUIs (Sabaki, GoGui) and match
tools (GnuGo's twogtp, gogui-twogtp).

Each command is one line, optionally preceded by a numeric id; the answer is
``=`` (or ``=id``) and the result, or ``?`` and an error message, then an
empty line. Bad input (an unknown command, a malformed or illegal move, a
board size the model was not trained for, a komi that is not finite or is
larger than the board) gets a ``?`` answer and the engine
keeps running. ``genmove`` searches ``--sims`` simulations with the model and
plays the most-visited move, as evaluation matches do.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from zeroloop.engine.games import IllegalMoveError, State
from zeroloop.engine.games.go import Go

COMMANDS = ("protocol_version", "name", "version", "known_command", "list_commands", "boardsize",
            "clear_board", "komi", "play", "genmove", "undo", "showboard", "final_score", "quit")


class GtpFailure(ValueError):
    """A command the engine refuses: answered with ``?`` and the message."""


def komi_problem(komi: float, size: int) -> str | None:
    """Why ``komi`` cannot score a ``size`` board, or None. Area scoring
    counts at most size*size points, so a larger komi (or nan, inf) decides
    every game before it starts and makes ``final_score`` read ``B+inf``."""
    area = size * size
    if not math.isfinite(komi):
        return f"is not a finite number (a {size}x{size} board takes -{area} to {area})"
    if abs(komi) > area:
        return f"is more than the {size}x{size} board's {area} points"
    return None


@dataclass
class GtpSession:
    """The engine's game: the board size and komi GTP set, the positions so
    far (for ``undo``), and the model that plays ``genmove``."""

    size: int
    model: str | None
    sims: int
    root: str = "."
    device: str = "auto"
    seed: int = 0
    komi: float | None = None
    states: list[State] = field(default_factory=list)
    implicit: set[int] = field(default_factory=set)  # positions after a pass the engine put in
    quit: bool = False

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self._evaluators: dict[int, object] = {}
        self.game = Go(self.size, self.komi)
        self.model_size = self._load(self.size)  # the model's board; refuses a bad model at start
        self.states = [self.game.initial_state()]

    # -- the model ----------------------------------------------------------
    def _load(self, size: int) -> int | None:
        """Load the model for a ``size`` board; its own size (None: an untrained net fits any)."""
        from zeroloop.apps.play import NetCache, PlayError, resolve_model

        game = Go(size)
        try:
            info = resolve_model(game, self.model, self.root)
        except PlayError as exc:
            raise GtpFailure(str(exc)) from None
        self._evaluators[size] = NetCache(self.device).evaluator(game, info, self.seed)
        return None if info.path is None else size

    def evaluator(self):
        if self.size not in self._evaluators:
            self._load(self.size)
        return self._evaluators[self.size]

    # -- the position -------------------------------------------------------
    @property
    def state(self) -> State:
        return self.states[-1]

    def _colour(self, text: str) -> bool:
        """True for black."""
        t = text.strip().lower()
        if t in ("b", "black"):
            return True
        if t in ("w", "white"):
            return False
        raise GtpFailure(f"invalid color {text!r}: black or white")

    def _to_move(self, black: bool) -> None:
        """Make ``black`` (or white) the side to move: GTP lets a controller
        play either colour; the other side passes in between."""
        if self.state.outcome is not None:
            raise GtpFailure("the game is over (two passes); clear_board starts a new one")
        if (self.state.ply % 2 == 0) != black:
            if self.state.passes >= 1:
                raise GtpFailure("that colour just moved, and a pass in between would end the game")
            self.states.append(self.game.apply(self.state, self.game.pass_action))
            self.implicit.add(len(self.states) - 1)

    def new_game(self) -> None:
        self.game = Go(self.size, self.komi)
        self.states = [self.game.initial_state()]
        self.implicit = set()

    # -- commands -------------------------------------------------------------
    def run(self, command: str, args: list[str]) -> str:
        handler = getattr(self, f"cmd_{command}", None)
        if command not in COMMANDS or handler is None:
            raise GtpFailure("unknown command")
        return handler(args)

    def cmd_protocol_version(self, args: list[str]) -> str:
        return "2"

    def cmd_name(self, args: list[str]) -> str:
        return "zeroloop"

    def cmd_version(self, args: list[str]) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("zeroloop")
        except PackageNotFoundError:
            return "dev"

    def cmd_known_command(self, args: list[str]) -> str:
        return "true" if args and args[0] in COMMANDS else "false"

    def cmd_list_commands(self, args: list[str]) -> str:
        return "\n".join(COMMANDS)

    def cmd_boardsize(self, args: list[str]) -> str:
        if len(args) != 1 or not args[0].isdigit():
            raise GtpFailure("boardsize needs one number")
        size = int(args[0])
        if not 2 <= size <= 19:
            raise GtpFailure("unacceptable size")
        if self.model_size is not None and size != self.model_size:
            raise GtpFailure(f"unacceptable size: the model plays {self.model_size}x{self.model_size}")
        if self.komi is not None and (problem := komi_problem(self.komi, size)):
            raise GtpFailure(f"unacceptable size: komi {self.komi:g} {problem}; set a smaller komi first")
        self.size = size
        self.new_game()
        return ""

    def cmd_clear_board(self, args: list[str]) -> str:
        self.new_game()
        return ""

    def cmd_komi(self, args: list[str]) -> str:
        try:
            komi = float(args[0])
        except (IndexError, ValueError):
            raise GtpFailure("komi needs a number") from None
        if problem := komi_problem(komi, self.size):
            raise GtpFailure(f"komi {args[0]} {problem}")
        self.komi = komi
        moves = [s.last for s in self.states[1:]]
        self.game = Go(self.size, komi)  # the same position, scored with the new komi
        state = self.game.initial_state()
        self.states = [state]
        for a in moves:
            state = self.game.apply(state, a)
            self.states.append(state)
        return ""

    def cmd_play(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpFailure("play needs a color and a vertex")
        black = self._colour(args[0])
        try:
            action = self.game.parse_action(args[1])
        except IllegalMoveError as exc:
            raise GtpFailure(f"invalid vertex: {exc}") from None
        before = len(self.states)
        self._to_move(black)
        try:
            self.states.append(self.game.apply(self.state, action))
        except IllegalMoveError as exc:
            del self.states[before:]
            self.implicit.discard(before)
            raise GtpFailure(f"illegal move: {exc}") from None
        return ""

    def cmd_genmove(self, args: list[str]) -> str:
        from zeroloop.apps.play import searched_move

        if len(args) != 1:
            raise GtpFailure("genmove needs a color")
        self._to_move(self._colour(args[0]))
        action, _ = searched_move(self.game, self.evaluator(), self.state, self.sims, self.rng)
        self.states.append(self.game.apply(self.state, action))
        return self.game.format_action(action)

    def cmd_undo(self, args: list[str]) -> str:
        if len(self.states) < 2:
            raise GtpFailure("cannot undo")
        self.states.pop()
        while len(self.states) - 1 in self.implicit:  # and the pass put in before that move
            self.implicit.discard(len(self.states) - 1)
            self.states.pop()
        return ""

    def cmd_showboard(self, args: list[str]) -> str:
        return "\n" + self.game.render(self.state)

    def cmd_final_score(self, args: list[str]) -> str:
        lead = self.game.score(self.state)
        return "0" if lead == 0 else f"{'B' if lead > 0 else 'W'}+{abs(lead):g}"

    def cmd_quit(self, args: list[str]) -> str:
        self.quit = True
        return ""


def _clean(line: str) -> str:
    """A GTP line as the protocol reads it: no comment, control characters
    as spaces (tabs included), no surrounding blanks."""
    line = line.split("#", 1)[0]
    return "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in line).strip()


def serve(session: GtpSession, inp: TextIO, out: TextIO) -> int:
    """Answer GTP commands from ``inp`` until ``quit`` or the end of input."""
    for raw in inp:
        line = _clean(raw)
        if not line:
            continue
        words = line.split()
        ident = ""
        if words[0].isdigit():
            ident, words = words[0], words[1:]
            if not words:
                continue
        try:
            answer = session.run(words[0].lower(), words[1:])
            text = f"={ident} {answer}".rstrip() if "\n" not in answer else f"={ident} {answer}"
        except GtpFailure as exc:
            text = f"?{ident} {exc}"
        except Exception as exc:  # a bug must not kill a GUI's engine: say it and go on
            text = f"?{ident} internal error: {type(exc).__name__}: {exc}"
        out.write(text + "\n\n")
        out.flush()
        if session.quit:
            break
    return 0


def main(game: str, model: str | None, sims: int, root: str, device: str, seed: int) -> int:
    from zeroloop.engine.games import make_game

    g = make_game(game)
    if not isinstance(g, Go):
        print(f"zeroloop gtp: {game} is not Go; GTP is the Go Text Protocol (go-9, go-7, go-N)",
              file=sys.stderr)
        return 2
    if not 1 <= sims <= 100_000:
        print(f"zeroloop gtp: --sims {sims} must be between 1 and 100000", file=sys.stderr)
        return 2
    try:
        session = GtpSession(g.size, model, sims, root, device, seed, komi=g.komi)
    except GtpFailure as exc:
        print(f"zeroloop gtp: {exc}", file=sys.stderr)
        return 2
    return serve(session, sys.stdin, sys.stdout)
