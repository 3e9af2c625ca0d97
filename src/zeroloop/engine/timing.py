"""Where self-play's time goes, part by part, measured in its own code path.

A :class:`PartTimer` is handed to :func:`~zeroloop.engine.selfplay.play_selfplay_games`,
to the :class:`~zeroloop.engine.search.BatchedMCTS` it builds, and to the
evaluators (:class:`~zeroloop.engine.nn.FixedBatchEvaluator`, the network's or
the constant one): each marks, at the end of a stretch of its work, which part
that stretch was (:meth:`PartTimer.lap`). The laps are a few per batched search
step (a step searches every game in flight), never per position (about as many
clock reads as the ``perf_counter`` pairs they replaced), and the games are the
same with a timer or without.

It is the one timing mechanism of the search: self-play and the search make
a timer of their own when given none, and the coarse split the pipeline logs
(:class:`~zeroloop.engine.search.SearchStats`: network / tree / rules) is the
sum of its parts (:meth:`~zeroloop.engine.search.SearchStats.charge`). An
evaluator given no timer is charged to ``network`` as a whole.
"""

from __future__ import annotations

import time

#: The parts, in the order a report lists them:
#:
#: encoding     ``game.encode`` of the positions the network computes (cache misses and padding)
#: cache        the position cache's keys, lookups, inserts and evictions
#: batching     gathering leaves into a request, fixed-size network batches (padding), and
#:              spreading the answers back to the leaves (priors masked and normalised)
#: network      the network call itself (a constant net: filling its answer)
#: tree         the numba kernels (selection, expansion and backup), roots, noise, tree reuse
#: rules        ``apply``, ``legal_mask`` and terminal checks, new games and their replayed start moves
#: move choice  the move played, from the visits and the temperature (Gumbel: the halving's winner)
#: records      the game records: each move's target, finished games, what ``on_game`` does with them
PARTS = ("encoding", "cache", "batching", "network", "tree", "rules", "move choice", "records")


class PartTimer:
    """Wall seconds spent in each of :data:`PARTS`, measured by laps.

    ``lap(part)`` charges the time since the previous lap (or :meth:`start`)
    to ``part``: each piece of instrumented code laps right after its own work,
    and laps before it calls code that may lap (an evaluator), so nested code
    charges its own parts and the caller the rest. One timer is shared by
    everything in one self-play run; laps of other timers would not see each
    other's. Not thread-safe (self-play runs in one thread per process).
    """

    __slots__ = ("seconds", "_last")

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(PARTS, 0.0)
        self._last = time.perf_counter()

    def start(self) -> None:
        """Begin a lap here: time before it is charged to no part."""
        self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Charge the time since the last lap or :meth:`start` to ``part``
        (one of :data:`PARTS`; another name raises ``KeyError``)."""
        now = time.perf_counter()
        self.seconds[part] += now - self._last
        self._last = now

    def reset(self) -> None:
        """Every part back to zero, and a lap begun here."""
        self.seconds = dict.fromkeys(PARTS, 0.0)
        self.start()

    @property
    def total(self) -> float:
        """Seconds charged to any part."""
        return sum(self.seconds.values())
