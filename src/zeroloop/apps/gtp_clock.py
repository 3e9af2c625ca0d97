"""The GTP engine's clock: the time controls GTP and KGS set, the time left
each side reports, and how many seconds the engine may search for a move.

GTP 2 (section 4.2 and ``time_settings``): ``main_time byo_yomi_time
byo_yomi_stones`` in seconds is Canadian byo-yomi; "byo_yomi_time 0 means
absolute time" (the stones then do not matter) and "byo_yomi_time > 0 with
byo_yomi_stones 0 means no time limit". ``time_left color time stones``
gives the time left in the current period, with ``stones`` the stones still
to play in it, 0 while in main time (or under absolute time). KGS adds
``kgs-time_settings none | absolute main | byoyomi main period periods |
canadian main period stones``; Japanese byo-yomi is kept as ``periods``
periods of ``period`` seconds, each move free while it fits in one.

The rule that never loses on time: the engine keeps, out of the time left,
one cheapest move's cost (:attr:`Clock.move_cost`, measured: a one-simulation
search and the answer around it) for every move it could still have to play
(the game's move cap), and splits only the rest over an estimate of the moves
left, with a safety factor. In byo-yomi it spends a share of the period.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: fraction of a move's share of the time that the search may use; the rest absorbs the
#: last chunk's overrun and the transport's delays
SAFETY = 0.7
#: the engine's own moves assumed left at least (so no move spends more than 1/8 of main time)
MIN_MOVES_LEFT = 8
#: the expected game length in plies per board point (a 7x7 game: ~74 plies; the cap is 3 per point)
EXPECTED_PLIES_PER_POINT = 1.5
#: the first estimate of a move's fixed cost in seconds (a one-simulation move and the pipe),
#: replaced by the measured one after the first move
FIRST_MOVE_COST_S = 0.05


@dataclass(frozen=True)
class TimeControl:
    """One side's time control. ``kind``: ``none``, ``absolute`` (main only),
    ``canadian`` (``period_s`` seconds for each ``stones`` moves after main) or
    ``byoyomi`` (``periods`` periods of ``period_s`` seconds, one move each)."""

    kind: str = "none"
    main_s: float = 0.0
    period_s: float = 0.0
    stones: int = 0
    periods: int = 0

    @classmethod
    def from_gtp(cls, main: float, byo: float, stones: int) -> TimeControl:
        """GTP's ``time_settings`` (see the module docstring for the spec's cases)."""
        if byo > 0 and stones == 0:
            return cls("none")
        if byo == 0:
            return cls("absolute", main)
        return cls("canadian", main, byo, stones)


@dataclass
class Reading:
    """What one side has left: ``time_s`` of main time while ``stones`` is 0,
    else of the current period with ``stones`` moves to play in it (Canadian)
    or ``stones`` periods left (byo-yomi), as GTP's ``time_left`` says it."""

    time_s: float
    stones: int = 0


def parse_time_settings(words: list[str], kgs: bool) -> TimeControl:
    """A ``time_settings`` or ``kgs-time_settings`` command's arguments; ValueError when bad."""
    if not kgs:
        if len(words) != 3:
            raise ValueError("time_settings needs main_time byo_yomi_time byo_yomi_stones")
        main, byo, stones = float(words[0]), float(words[1]), int(words[2])
        _check(main, byo, stones)
        return TimeControl.from_gtp(main, byo, stones)
    kind, rest = (words[0].lower(), words[1:]) if words else ("", [])
    arity = {"none": 0, "absolute": 1, "byoyomi": 3, "canadian": 3}
    if kind not in arity or len(rest) != arity[kind]:
        raise ValueError("kgs-time_settings needs none | absolute main | byoyomi main period periods"
                         " | canadian main period stones")
    if kind == "none":
        return TimeControl()
    main = float(rest[0])
    if kind == "absolute":
        _check(main, 0, 0)
        return TimeControl("absolute", main)
    period, count = float(rest[1]), int(rest[2])
    _check(main, period, count)
    if count == 0:  # no stones or periods: main time is all there is
        return TimeControl("absolute", main)
    if kind == "byoyomi":
        return TimeControl("byoyomi", main, period, periods=count)
    return TimeControl("canadian", main, period, stones=count)


def _check(*values: float) -> None:
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError("times and counts must be finite and not negative")


def moves_left(size: int, ply: int) -> float:
    """The engine's own moves still to play, estimated: half the expected plies left, at least
    :data:`MIN_MOVES_LEFT`."""
    expected = EXPECTED_PLIES_PER_POINT * size * size
    return max(MIN_MOVES_LEFT, (expected - ply) / 2)


def move_budget(tc: TimeControl, left: Reading, own_moves_left: float, max_moves_left: int,
                move_cost: float) -> float:
    """Seconds the search may take for this move (``inf``: no limit; 0: the
    cheapest move, one simulation).

    own_moves_left: the estimate of the engine's moves to come (:func:`moves_left`).
    max_moves_left: the most moves it could still have to play (the move cap).
    move_cost: a move's fixed cost in seconds outside the search.
    """
    if tc.kind == "none":
        return math.inf
    if left.stones > 0:  # in byo-yomi: a share of this period
        share = left.time_s / left.stones if tc.kind == "canadian" else left.time_s
        return max(0.0, SAFETY * share - move_cost)
    after_main = {"canadian": tc.period_s / max(tc.stones, 1), "byoyomi": tc.period_s}.get(tc.kind, 0.0)
    if after_main > 0:  # main time runs into byo-yomi: it is a bonus on top of one period's share
        share = min(left.time_s, left.time_s / own_moves_left + after_main)
        return max(0.0, SAFETY * share - move_cost)
    spare = left.time_s - max_moves_left * move_cost  # absolute: keep the cheapest move for every one
    return max(0.0, SAFETY * spare / own_moves_left - move_cost)


@dataclass
class Clock:
    """The engine's clock: the time control, and each side's time left as
    ``time_left`` last reported it or, between reports, as the engine counted
    its own moves. ``move_cost``: the measured fixed cost of a move (seconds)."""

    control: TimeControl
    left: dict[bool, Reading]
    move_cost: float = FIRST_MOVE_COST_S

    @classmethod
    def start(cls, control: TimeControl) -> Clock:
        first = control.main_s
        if control.kind != "none" and first == 0 and control.kind != "absolute":
            return cls(control, {c: cls._period(control) for c in (True, False)})
        return cls(control, {c: Reading(first) for c in (True, False)})

    @staticmethod
    def _period(control: TimeControl) -> Reading:
        if control.kind == "canadian":
            return Reading(control.period_s, control.stones)
        return Reading(control.period_s, control.periods)

    def spend(self, black: bool, seconds: float) -> None:
        """Count ``seconds`` of ``black``'s (or White's) move on its clock."""
        c, r = self.control, self.left[black]
        if c.kind == "none":
            return
        if r.stones == 0:
            r.time_s -= seconds
            if r.time_s >= 0 or c.kind == "absolute":
                return
            seconds = -r.time_s  # main time ran out during this move: the rest counts in byo-yomi
            r = self.left[black] = self._period(c)
        if c.kind == "canadian":
            r.time_s -= seconds
            r.stones -= 1
            if r.stones <= 0:
                self.left[black] = self._period(c)
        elif seconds > r.time_s:  # byo-yomi: an overrun uses up a period
            r.stones -= 1
