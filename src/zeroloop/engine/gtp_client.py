"""Talking to a Go engine over the Go Text Protocol (GTP 2), e.g. GnuGo.

:class:`GtpEngine` starts the engine as a subprocess and sends one command at
a time: a response starts with ``=`` (success) or ``?`` (failure) and ends
with a blank line. A failure raises :class:`GtpError` naming the command and
the engine's message; an engine that exits or stops answering raises too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

#: Debian installs GnuGo here, off the default PATH
GNUGO_PATHS = ("/usr/games/gnugo", "/usr/bin/gnugo")


class GtpError(RuntimeError):
    """A GTP command failed, or the engine stopped answering."""


def find_gnugo() -> str | None:
    """The GnuGo executable: ``$ZEROLOOP_GNUGO``, ``gnugo`` on PATH, or Debian's place."""
    env = os.environ.get("ZEROLOOP_GNUGO")
    if env:
        return env if os.access(env, os.X_OK) else None
    found = shutil.which("gnugo")
    if found:
        return found
    return next((p for p in GNUGO_PATHS if os.access(p, os.X_OK)), None)


def gnugo_command(level: int = 10, *, chinese_rules: bool = True, capture_all_dead: bool = True,
                  seed: int | None = None) -> list[str]:
    """The command line of GnuGo in GTP mode at ``level`` (1-10); a clear
    error where GnuGo is not installed.

    ``capture_all_dead``: GnuGo captures every dead stone of the opponent's
    before it passes (its option for Tromp-Taylor servers such as CGOS).
    Without it GnuGo passes with dead stones left on the board, expecting
    them to be removed by agreement; Tromp-Taylor scoring, zeroloop's, counts
    every stone on the board, so a net that simply passes back scores those
    dead stones and its games against GnuGo measure the rules, not play
    (seen on the 7x7 preset: a first-generation net "won" 40% of its games
    against GnuGo, which judged itself 40-58 points ahead in every one)."""
    exe = find_gnugo()
    if exe is None:
        raise FileNotFoundError("GnuGo is not installed: `make gnugo` (Debian's gnugo package, "
                                "/usr/games/gnugo) or set ZEROLOOP_GNUGO to its path")
    cmd = [exe, "--mode", "gtp", "--level", str(int(level))]
    if chinese_rules:
        cmd.append("--chinese-rules")  # area scoring, as zeroloop's Tromp-Taylor rules
    if capture_all_dead:
        cmd.append("--capture-all-dead")
    if seed is not None:
        cmd += ["--seed", str(int(seed))]
    return cmd


class GtpEngine:
    """One engine process driven over GTP."""

    def __init__(self, command: Sequence[str], *, name: str | None = None) -> None:
        self.name = name or os.path.basename(command[0])
        self._proc = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def send(self, command: str) -> str:
        """Send one command; the response's text without the ``=``."""
        if self._proc.poll() is not None:
            raise GtpError(f"{self.name} has exited (code {self._proc.returncode}); cannot send {command!r}")
        try:
            self._proc.stdin.write(command.strip() + "\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            raise GtpError(f"{self.name} closed its input; cannot send {command!r}") from None
        lines = []
        while True:
            line = self._proc.stdout.readline()
            if not line:
                raise GtpError(f"{self.name} exited while answering {command!r}")
            line = line.rstrip("\r\n")
            if not line and lines:
                break
            if line or lines:
                lines.append(line)
        text = "\n".join(lines)
        if text.startswith("?"):
            raise GtpError(f"{self.name} refused {command!r}: {text[1:].strip()}")
        if not text.startswith("="):
            raise GtpError(f"{self.name} answered {command!r} with {text!r}, not a GTP response")
        return text[1:].strip()

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self.send("quit")
            except GtpError:
                pass
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()

    def __enter__(self) -> GtpEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GtpPlayer:
    """An outside Go engine as a match player (:class:`~zeroloop.engine.players.Player`):
    one engine process per running game, started when the game first needs
    it. The engine is shown the position then reached stone by stone (the
    opening's random moves capture nothing), then every move as it is
    played; ``genmove`` gives its moves (``resign`` is played as a pass, so
    the game goes on to its scored end; so is a move that repeats an earlier
    position, which GnuGo's simple ko allows and positional superko does not:
    the engine takes it back with ``undo``). Engines are closed when their game
    ends or new games start."""

    def __init__(self, game, command: Sequence[str], name: str) -> None:
        from zeroloop.engine.games.go import Go

        if not isinstance(game, Go):
            raise ValueError(f"a GTP engine plays Go, not {game.name}")
        self.game, self.command, self.name = game, list(command), name
        self._engines: dict[int, GtpEngine] = {}
        self._generated: dict[int, int] = {}  # game -> the move its engine just generated
        self.superko_passes = 0  # moves the engine chose that positional superko forbids, passed instead

    def _colour(self, state) -> str:
        return "black" if state.ply % 2 == 0 else "white"

    def _engine(self, index: int, state) -> GtpEngine:
        """Game ``index``'s engine, started on ``state`` if it has none yet."""
        e = self._engines.get(index)
        if e is None:
            e = GtpEngine(self.command, name=self.name)
            e.send(f"boardsize {self.game.size}")
            e.send("clear_board")
            e.send(f"komi {self.game.komi:g}")
            black, white = (state.me, state.opp) if state.ply % 2 == 0 else (state.opp, state.me)
            for colour, stones in (("black", black), ("white", white)):
                for cell, bit in enumerate(self.game.cell_bits):
                    if stones & bit:
                        e.send(f"play {colour} {self.game.format_action(cell)}")
            self._engines[index] = e
        return e

    def new_games(self, n: int) -> None:
        self.close()

    def choose(self, indices, states) -> list[int]:
        out = []
        for i, s in zip(indices, states, strict=True):
            answer = self._engine(i, s).send(f"genmove {self._colour(s)}").strip()
            if answer.lower() == "resign":  # not played on its board: observe sends the pass
                out.append(self.game.pass_action)
                continue
            action = self.game.parse_action(answer)
            if not self.game.legal_mask(s)[action]:
                # GnuGo forbids only the immediate ko recapture; a move that repeats an
                # earlier position (positional superko) is taken back and passed instead
                self._engines[i].send("undo")
                self.superko_passes += 1
                out.append(self.game.pass_action)
                continue
            self._generated[i] = action  # already on its board
            out.append(action)
        return out

    def observe(self, index: int, before, action: int) -> None:
        after = self.game.apply(before, action)
        e = self._engines.get(index)
        if e is None and after.outcome is None:
            e = self._engine(index, before)  # the first move it sees: the position before it
        if e is not None and self._generated.pop(index, None) != action:
            e.send(f"play {self._colour(before)} {self.game.format_action(action)}")
        if after.outcome is not None and index in self._engines:
            self._engines.pop(index).close()

    def close(self) -> None:
        for e in self._engines.values():
            e.close()
        self._engines.clear()
        self._generated.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
