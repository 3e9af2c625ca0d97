"""How games look as text: the board diagram, the result, digit notation."""

from __future__ import annotations

import re
from collections.abc import Sequence

from zeroloop.engine.games.base import IllegalMoveError, State


class BoardText:
    """The text board of a grid game (X moves first; the last move in brackets).

    Needs ``rows``, ``cols``, ``bits_to_cells`` and ``last_cell`` from the game.
    """

    rows: int
    cols: int

    def render(self, state: State) -> str:
        occ = self.bits_to_cells([state.me, state.opp])
        first, second = (occ[0], occ[1]) if state.ply % 2 == 0 else (occ[1], occ[0])
        last = self.last_cell(state)
        lines = []
        for r in range(self.rows):
            row = []
            for c in range(self.cols):
                i = r * self.cols + c
                ch = "X" if first[i] else "O" if second[i] else "."
                row.append(f"[{ch}]" if i == last else f" {ch} ")
            lines.append(f"{self._row_label(r):>2} " + "".join(row))
        lines.append("   " + "".join(f" {self._col_label(c)} " for c in range(self.cols)))
        side = "X" if state.ply % 2 == 0 else "O"
        if state.outcome is None:
            lines.append(f"{side} to move")
        else:
            lines.append(self.describe_outcome(state))
        return "\n".join(lines)

    def describe_outcome(self, state: State) -> str:
        if state.outcome is None:
            return "game in progress"
        if state.outcome == 0:
            return "draw"
        mover_won = state.outcome > 0
        first_won = mover_won == (state.ply % 2 == 0)
        return f"{'X' if first_won else 'O'} wins"

    def _row_label(self, r: int) -> str:
        return str(self.rows - r)

    def _col_label(self, c: int) -> str:
        return "abcdefghijklmnopqrstuvwxyz"[c]


class TokenNotation:
    """Moves written as tokens, a cell like ``d3`` or ``D4`` or ``pass``,
    separated by spaces or commas or run together (``"f5d6c3"``). A game sets
    ``_token``, a compiled pattern whose group 1 is one move, and implements
    ``format_action`` and ``parse_action``."""

    _token: re.Pattern

    def format_moves(self, actions: Sequence[int]) -> str:
        return " ".join(self.format_action(a) for a in actions)

    def parse_moves(self, text: str) -> list[int]:
        out, pos, text = [], 0, text.strip()
        while pos < len(text):
            m = self._token.match(text, pos)
            if not m:
                raise IllegalMoveError(f"cannot read a move at {text[pos:].split()[0]!r}")
            out.append(self.parse_action(m.group(1)))
            pos = m.end()
            while pos < len(text) and text[pos] in " ,;\t":
                pos += 1
        return out


class DigitNotation:
    """Moves written as one digit each, 1..num_actions, so a game is a digit
    string like ``"4453"`` (Connect Four columns, tic-tac-toe cells)."""

    num_actions: int
    digit_noun = "move"

    def format_action(self, action: int) -> str:
        return str(action + 1)

    def parse_action(self, text: str) -> int:
        t = text.strip()
        if len(t) != 1 or not "1" <= t <= str(self.num_actions):
            raise IllegalMoveError(f"{text!r} is not a {self.digit_noun} 1-{self.num_actions}")
        return int(t) - 1

    def format_moves(self, actions: Sequence[int]) -> str:
        return "".join(self.format_action(a) for a in actions)

    def parse_moves(self, text: str) -> list[int]:
        return [self.parse_action(ch) for ch in text if not ch.isspace()]
