"""Which RUNNING trials still have a process: heartbeats in the Optuna storage.

A process killed with SIGKILL (or by the OOM killer, or with its machine)
runs no handler, so its trial would stay RUNNING in Optuna and MLflow for
ever. The process running a trial records a heartbeat every
:func:`heartbeat_interval` seconds; a trial whose last heartbeat is older
than the grace period has no live process, and Optuna fails it at the start
of any trial of the study (``fail_stale_trials``), calling ``on_lost``.
A trial that a live process runs (a parallel job, another machine) keeps
beating and is left alone.

RDB storages (SQLite, PostgreSQL, MySQL) have Optuna's own heartbeat (a
table, the database's clock). Optuna 5.0's JournalStorage has none:
:class:`JournalHeartbeatStorage` records it as a trial system attribute
with the wall clock, which one machine's processes share (a journal file
serves one machine).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable
from datetime import datetime

from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages._heartbeat import BaseHeartbeat
from optuna.trial import TrialState

#: The environment variable that sets the seconds between heartbeats (a whole number, >= 1).
HEARTBEAT_ENV = "ZEROLOOP_TUNE_HEARTBEAT"
#: Seconds between heartbeats by default.
HEARTBEAT_S = 10
#: A trial is lost after this many heartbeat intervals without one (plus a server's restart wait).
GRACE_BEATS = 3
#: The trial system attribute that holds a journal trial's last heartbeat (seconds since the epoch).
JOURNAL_ATTR = "zeroloop:heartbeat"

OnLost = Callable[..., None]  # (study, FrozenTrial) -> None, after the trial is failed

log = logging.getLogger("zeroloop.tuning")


def heartbeat_interval() -> int:
    """Seconds between a trial's heartbeats: :data:`HEARTBEAT_S`, or
    :data:`HEARTBEAT_ENV`. Every process sharing a study must use the same."""
    text = os.environ.get(HEARTBEAT_ENV, "").strip()
    if not text:
        return HEARTBEAT_S
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{HEARTBEAT_ENV}={text!r}: must be a whole number of seconds, at least 1")
    return int(text)


def grace_period(extra_s: float = 0.0) -> int:
    """Seconds without a heartbeat after which a trial is lost: :data:`GRACE_BEATS`
    intervals, plus ``extra_s`` (how long a database restart may hold heartbeats back)."""
    return GRACE_BEATS * heartbeat_interval() + int(extra_s)


def lost_reason(grace: int) -> str:
    """Why a lost trial failed (its MLflow run's ``error``)."""
    return (f"no heartbeat for over {grace} s: no process runs it (killed with SIGKILL or by the OOM "
            "killer, or its machine lost)")


def lost_line(number: int, grace: int) -> str:
    """The line a lost trial gets where the study is run."""
    return f"trial {number}: {lost_reason(grace)}; marked failed in Optuna and MLflow"


def _never_beat(trial, grace: float) -> bool:
    """Whether a RUNNING trial with no heartbeat at all is lost: it started
    over ``grace`` seconds ago (its process's clock, as Optuna writes
    ``datetime_start``), so its process died between creating the trial and
    its first beat, which a live process records at once."""
    start = trial.datetime_start
    return start is not None and (datetime.now() - start).total_seconds() > grace


class BeatingRDBStorage(RDBStorage):
    """Optuna's RDBStorage whose heartbeat never stops its thread: a failed
    write (a locked SQLite file, a lost connection) is logged and the next
    beat tries again, where the thread would have died with it. A trial
    whose process died before its first beat is lost too (Optuna's check
    passes over a trial without a heartbeat, so it would stay RUNNING)."""

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        stale = super()._get_stale_trial_ids(study_id)
        grace = self.grace_period if self.grace_period is not None else 2 * self.heartbeat_interval
        for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
            if trial._trial_id in stale or not _never_beat(trial, grace):
                continue
            with _create_scoped_session(self.scoped_session) as session:
                if models.TrialHeartbeatModel.where_trial_id(trial._trial_id, session) is None:
                    stale.append(trial._trial_id)
        return stale

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            super().record_heartbeat(trial_id)
        except Exception as exc:  # noqa: BLE001 - any storage error; the next beat tries again
            log.warning("trial heartbeat not recorded (%s); trying again in %s s", type(exc).__name__,
                        self.heartbeat_interval)


class JournalHeartbeatStorage(JournalStorage, BaseHeartbeat):
    """A JournalStorage with heartbeats (Optuna 5.0's has none): each is a
    trial system attribute holding the wall-clock time of the beat."""

    def __init__(self, backend, *, interval: int, grace: int, on_lost: OnLost | None = None) -> None:
        super().__init__(backend)
        self.heartbeat_interval, self.grace_period, self.on_lost = interval, grace, on_lost

    def record_heartbeat(self, trial_id: int) -> None:
        try:
            self.set_trial_system_attr(trial_id, JOURNAL_ATTR, time.time())
        except (UpdateFinishedTrialError, KeyError):
            pass  # it ended meanwhile (another process failed it: this one was silent too long)
        except Exception as exc:  # noqa: BLE001 - a file error; the next beat tries again
            log.warning("trial heartbeat not recorded (%s); trying again in %s s", type(exc).__name__,
                        self.heartbeat_interval)

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        running = self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        return [t._trial_id for t in running
                if (now - t.system_attrs[JOURNAL_ATTR] > self.grace_period if JOURNAL_ATTR in t.system_attrs
                    else _never_beat(t, self.grace_period))]

    def get_heartbeat_interval(self) -> int | None:
        return self.heartbeat_interval

    def get_heartbeat_stale_trial_callback(self) -> OnLost | None:
        return self.on_lost


def rdb_heartbeat_kwargs(grace: int, on_lost: OnLost | None) -> dict:
    """RDBStorage's heartbeat arguments."""
    return {"heartbeat_interval": heartbeat_interval(), "grace_period": grace,
            "heartbeat_stale_trial_callback": on_lost}


def quietly(make: Callable[[], BaseStorage]) -> BaseStorage:
    """``make()`` without Optuna's warning that heartbeats are experimental."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return make()


def fail_stale(study) -> None:
    """Fail the study's trials whose heartbeat stopped (each through the
    storage's ``on_lost``), as Optuna does at the start of every trial."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)

