"""``zeroloop gtp``: a model as a Go engine speaking the Go Text Protocol
(GTP 2) on standard input and output, for GUIs (Sabaki, GoGui) and match
tools (GnuGo's twogtp, gogui-twogtp).

Each command is one line, optionally preceded by a numeric id; the answer is
``=`` (or ``=id``) and the result, or ``?`` and an error message, then an
empty line. Bad input (an unknown command, a malformed or illegal move, a
board size the model was not trained for, a komi that is not finite or is
larger than the board) gets a ``?`` answer and the engine
keeps running. ``genmove`` searches ``--sims`` simulations with the model and
plays the most-visited move, as evaluation matches do; under a time control
(``time_settings``, ``kgs-time_settings``, ``time_left``) it searches at most
that many, for as long as :mod:`zeroloop.apps.gtp_clock` allows. ``lz-analyze``
streams Leela Zero's ``info`` lines until the next command arrives: the loop
reads standard input on a thread of its own, so a command can stop a search.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from zeroloop.apps.gtp_clock import Clock, Reading, move_budget, moves_left, parse_time_settings
from zeroloop.apps.gtp_search import (
    ANALYSIS_SIMS,
    AnalysisStream,
    RootSearch,
    capture_move,
    chains,
    dead_chains,
    fixed_handicap_points,
)
from zeroloop.engine.games import IllegalMoveError, State
from zeroloop.engine.games.go import Go

COMMANDS = ("protocol_version", "name", "version", "known_command", "list_commands", "boardsize",
            "clear_board", "komi", "play", "genmove", "undo", "showboard", "final_score", "quit",
            "time_settings", "kgs-time_settings", "time_left", "kgs-genmove_cleanup", "final_status_list",
            "fixed_handicap", "place_free_handicap", "set_free_handicap", "lz-analyze")


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
    clock: Clock | None = None  # None: no time control, every genmove searches `sims`
    received: float = 0.0  # time.perf_counter() when the command being answered was read

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
    def run(self, command: str, args: list[str]) -> str | AnalysisStream:
        handler = getattr(self, f"cmd_{command.replace('-', '_')}", None)
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

    def cmd_genmove(self, args: list[str], cleanup: bool = False) -> str:
        if len(args) != 1:
            raise GtpFailure("genmove needs a color")
        black = self._colour(args[0])
        self._to_move(black)
        search = RootSearch(self.game, self.evaluator(), self.state, self.sims, self.rng)
        if self.clock is None:
            search.step(self.sims)
        else:
            most = (self.game.max_moves - self.state.ply + 1) // 2  # the engine's moves before the cap
            budget = move_budget(self.clock.control, self.clock.left[black],
                                 moves_left(self.size, self.state.ply), most, self.clock.move_cost)
            search.until(self.received + min(budget, 1e6))
        action = search.best()
        if cleanup and action == self.game.pass_action:  # KGS's cleanup: capture what is dead first
            dead = dead_chains(self.game, self.state, self.seed)
            capture = capture_move(self.game, self.state, dead)
            action = action if capture is None else capture
        self.states.append(self.game.apply(self.state, action))
        if self.clock is not None:
            elapsed = time.perf_counter() - self.received
            # the cheapest move: this one without its search but one simulation, and the pipe's delay
            cheapest = elapsed - search.search_s + search.search_s / max(search.done, 1) + PIPE_S
            self.clock.move_cost = max(0.8 * self.clock.move_cost, cheapest)
            self.clock.spend(black, elapsed)
        return self.game.format_action(action)

    def cmd_kgs_genmove_cleanup(self, args: list[str]) -> str:
        return self.cmd_genmove(args, cleanup=True)

    # -- time ---------------------------------------------------------------
    def _set_time(self, args: list[str], kgs: bool) -> str:
        try:
            control = parse_time_settings(args, kgs)
        except ValueError as exc:
            raise GtpFailure(str(exc)) from None
        self.clock = None if control.kind == "none" else Clock.start(control)
        if self.clock is not None:  # warm the search (numba, the network) before the clock runs
            RootSearch(self.game, self.evaluator(), self.game.initial_state(), 2, self.rng).step(2)
        return ""

    def cmd_time_settings(self, args: list[str]) -> str:
        return self._set_time(args, kgs=False)

    def cmd_kgs_time_settings(self, args: list[str]) -> str:
        return self._set_time(args, kgs=True)

    def cmd_time_left(self, args: list[str]) -> str:
        black = self._colour(args[0] if args else "")
        try:
            t, stones = float(args[1]), int(args[2])
        except (IndexError, ValueError):
            raise GtpFailure("time_left needs a color, the seconds left and the stones left") from None
        if len(args) != 3 or not math.isfinite(t) or stones < 0:
            raise GtpFailure("time_left needs a color, the seconds left and the stones left")
        if self.clock is not None:
            self.clock.left[black] = Reading(max(t, 0.0), stones)
        return ""

    # -- handicap -------------------------------------------------------------
    def _place_handicap(self, command: str, actions: list[int]) -> str:
        if len(self.states) > 1 or self.state.me | self.state.opp:
            raise GtpFailure(f"{command}: the board is not empty")
        if len(actions) < 2 or len(set(actions)) != len(actions) or self.game.pass_action in actions:
            raise GtpFailure(f"{command}: needs at least 2 distinct points, no pass")
        for a in actions:  # Black's stones with White's passes between: White moves next
            self._to_move(True)
            self.states.append(self.game.apply(self.state, a))
        return " ".join(self.game.format_action(a) for a in actions)

    def _handicap_count(self, command: str, args: list[str], most: int) -> int:
        if len(args) != 1 or not args[0].isdigit() or not 2 <= int(args[0]) <= most:
            raise GtpFailure(f"{command}: invalid number of stones (2 to {most} on {self.size}x{self.size})")
        return int(args[0])

    def cmd_fixed_handicap(self, args: list[str]) -> str:
        points = fixed_handicap_points(self.size)
        if not points:
            raise GtpFailure(f"fixed_handicap: GTP has no fixed placement on a {self.size}x{self.size} board "
                             "(it starts at 8x8); use set_free_handicap")
        n = self._handicap_count("fixed_handicap", args, max(points))
        return self._place_handicap("fixed_handicap", [self.game.parse_action(v) for v in points[n]])

    def cmd_place_free_handicap(self, args: list[str]) -> str:
        n = self._handicap_count("place_free_handicap", args, self.size * self.size - 1)
        points = fixed_handicap_points(self.size)
        if n in points:
            return self._place_handicap("place_free_handicap", [self.game.parse_action(v) for v in points[n]])
        if len(self.states) > 1 or self.state.me | self.state.opp:
            raise GtpFailure("place_free_handicap: the board is not empty")
        chosen: list[int] = []
        state = self.state
        for _ in range(n):  # the search's choice for Black, White passing in between
            search = RootSearch(self.game, self.evaluator(), state, self.sims, self.rng)
            search.step(self.sims)
            score = search.result.visits[0] + search.result.priors[0] * 1e-3
            score[self.game.pass_action] = -1
            a = int(score.argmax())
            chosen.append(a)
            state = self.game.apply(self.game.apply(state, a), self.game.pass_action)
        return self._place_handicap("place_free_handicap", chosen)

    def cmd_set_free_handicap(self, args: list[str]) -> str:
        try:
            actions = [self.game.parse_action(v) for v in args]
        except IllegalMoveError as exc:
            raise GtpFailure(f"set_free_handicap: invalid vertex: {exc}") from None
        return self._place_handicap("set_free_handicap", actions)

    # -- the end of the game and analysis --------------------------------------
    def cmd_final_status_list(self, args: list[str]) -> str:
        if len(args) != 1 or args[0].lower() not in ("dead", "alive", "seki"):
            raise GtpFailure("final_status_list needs dead, alive or seki")
        if args[0].lower() == "seki":
            return ""  # the judgement does not tell seki apart (see dead_chains)
        state = self.state
        dead = dead_chains(self.game, state, self.seed)
        listed = dead if args[0].lower() == "dead" else [g for g in chains(self.game, state.me | state.opp)
                                                          if g not in dead]
        return "\n".join(" ".join(self._vertices(g)) for g in listed)

    def _vertices(self, bits: int) -> list[str]:
        cells = np.flatnonzero(self.game.bits_to_cells([bits])[0])
        return [self.game.format_action(int(c)) for c in cells]

    def cmd_lz_analyze(self, args: list[str]) -> AnalysisStream:
        black, interval = None, 100
        words = [w.lower() for w in args]
        while words:
            w = words.pop(0)
            if w in ("b", "w", "black", "white") and black is None:
                black = self._colour(w)
            elif w == "interval" and words and words[0].isdigit():
                interval = int(words.pop(0))
            elif w.isdigit():
                interval = int(w)
            else:
                raise GtpFailure(f"lz-analyze: unknown argument {w!r} (lz-analyze [color] [interval])")
        state = self.state
        if state.outcome is not None:
            raise GtpFailure("lz-analyze: the game is over (two passes)")
        if black is not None and (state.ply % 2 == 0) != black:
            if state.passes >= 1:
                raise GtpFailure("lz-analyze: that colour just moved, and a pass in between would end "
                                 "the game")
            state = self.game.apply(state, self.game.pass_action)
        search = RootSearch(self.game, self.evaluator(), state, max(self.sims, ANALYSIS_SIMS), self.rng)
        return AnalysisStream(search, max(interval, 1) / 100)

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


#: the pipe's delay counted into a move's fixed cost, seconds
PIPE_S = 0.01
def _clean(line: str) -> str:
    """A GTP line as the protocol reads it: no comment, control characters
    as spaces (tabs included), no surrounding blanks."""
    line = line.split("#", 1)[0]
    return "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in line).strip()


def serve(session: GtpSession, inp: TextIO, out: TextIO) -> int:
    """Answer GTP commands from ``inp`` until ``quit`` or the end of input.
    A thread reads ``inp`` into a queue (None at its end), so that a command
    arriving during ``lz-analyze`` stops the analysis."""
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for raw in inp:
            lines.put(raw)
        lines.put(None)

    threading.Thread(target=read, name="gtp-stdin", daemon=True).start()
    pending: str | None = ""
    while True:
        raw = pending if pending else lines.get()
        pending = ""
        if raw is None:
            break
        session.received = time.perf_counter()
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
            if isinstance(answer, AnalysisStream):  # "=" at once, then the stream, which a command ends
                out.write(f"={ident}\n")
                out.flush()
                pending = answer.run(lines, out)
                if pending is None:
                    break
                continue
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
