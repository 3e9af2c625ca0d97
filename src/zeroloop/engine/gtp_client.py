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


def gnugo_command(level: int = 10, *, chinese_rules: bool = True, seed: int | None = None) -> list[str]:
    """The command line of GnuGo in GTP mode at ``level`` (1-10); a clear
    error where GnuGo is not installed."""
    exe = find_gnugo()
    if exe is None:
        raise FileNotFoundError("GnuGo is not installed: `make gnugo` (Debian's gnugo package, "
                                "/usr/games/gnugo) or set ZEROLOOP_GNUGO to its path")
    cmd = [exe, "--mode", "gtp", "--level", str(int(level))]
    if chinese_rules:
        cmd.append("--chinese-rules")  # area scoring, as zeroloop's Tromp-Taylor rules
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
