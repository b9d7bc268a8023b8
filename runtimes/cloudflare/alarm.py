"""The Durable Object's single alarm: when to arm it, and how a failing alarm backs off.

Every wake-up of a conversation tree goes through the one alarm a Durable Object has
(``setAlarm`` replaces it), and nothing else may call ``setAlarm``:

* :func:`alarm_time` turns ``next_wake()`` into the one time to arm: the earliest
  durable deadline, or — while a task runs in this isolate — a heartbeat about every
  30 s, so a long model call keeps the object resident and, if the isolate is evicted
  anyway, the heartbeat re-opens it and ``resume()`` picks the work up.
* :class:`AlarmSlot` arms it, skipping redundant ``setAlarm`` calls (a heartbeat already
  armed sooner than the new one stays; a deadline is armed exactly).
* :class:`AlarmGuard` bounds a crash loop. The failure count is written *before* the
  alarm's work, in the object's own SQLite, so an alarm that kills its isolate (out of
  memory, CPU limit) still counts: after ``max_failures`` consecutive failed attempts
  the guard stops re-arming and reports, instead of re-running forever; a success
  resets it. A caught failure re-arms with exponential backoff.

All times are epoch milliseconds passed in by the caller (the runtime reads the clock).
Alarm delivery is at-least-once, so none of this needs to be exactly-once: ``resume()``
is idempotent and an early or duplicate alarm only re-computes the same next time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from runtimes.cloudflare.storage import SqlStorage

__all__ = [
    "HEARTBEAT_MS",
    "AlarmFailures",
    "AlarmGuard",
    "AlarmReport",
    "AlarmSlot",
    "AlarmStorage",
    "FailureStore",
    "SqlFailureStore",
    "alarm_time",
    "backoff_ms",
]

HEARTBEAT_MS = 30_000


def alarm_time(
    wake: int | None, now: int, *, running: bool, heartbeat_ms: int = HEARTBEAT_MS
) -> int | None:
    """The one time to arm, or ``None`` to have no alarm.

    ``wake`` is ``next_wake()``: ``None`` (nothing to do), ``<= now`` (work can run now)
    or a future deadline. ``running``: a task is running in this isolate. Work that is
    due but not running fires at once (``now``); while tasks run, the heartbeat is armed
    unless a deadline comes sooner.
    """
    if running:
        beat = now + heartbeat_ms
        return min(wake, beat) if wake is not None and wake > now else beat
    if wake is None:
        return None
    return max(wake, now)


class AlarmStorage(Protocol):
    """The alarm half of ``ctx.storage`` (epoch milliseconds)."""

    async def getAlarm(self) -> Any: ...

    async def setAlarm(self, when: int, /) -> Any: ...

    async def deleteAlarm(self) -> Any: ...


class AlarmSlot:
    """The Durable Object's only caller of ``setAlarm``/``deleteAlarm``.

    It remembers what it armed, so re-arming after every change costs nothing when the
    time did not change. :meth:`consumed` must be called when the alarm fires (workerd
    clears it while the handler runs).
    """

    def __init__(self, storage: AlarmStorage, *, heartbeat_ms: int = HEARTBEAT_MS) -> None:
        self._storage = storage
        self._heartbeat_ms = heartbeat_ms
        self._armed: int | None = None
        self._known = False

    @property
    def armed(self) -> int | None:
        return self._armed

    def consumed(self) -> None:
        self._armed, self._known = None, True

    async def arm(
        self, wake: int | None, now: int, *, running: bool, keep_near: bool = True
    ) -> int | None:
        """Arm the time :func:`alarm_time` computes; return what is armed afterwards.

        ``keep_near``: when there is nothing left to wake for, an alarm armed at most a
        heartbeat ahead is left to fire rather than deleted. Its delivery finds nothing
        to do (the isolate is still resident a heartbeat later: idle objects are evicted
        after 70 s or more), and the next request within that heartbeat needs no
        ``setAlarm`` of its own: a request costs no alarm call unless the deadline moves.
        A parked or discarded actor passes ``False``: a fresh isolate would have to
        open the actor only to find nothing.
        """
        when = alarm_time(wake, now, running=running, heartbeat_ms=self._heartbeat_ms)
        return await self.arm_at(
            when,
            now,
            heartbeat=running,
            keep_until=now + self._heartbeat_ms if keep_near and when is None else None,
        )

    async def arm_at(
        self,
        when: int | None,
        now: int,
        *,
        heartbeat: bool = False,
        keep_until: int | None = None,
    ) -> int | None:
        """Arm ``when`` (``None``: no alarm). ``heartbeat``: an alarm armed sooner and
        still ahead is soon enough. ``keep_until``: with ``when`` ``None``, an armed
        alarm due by then is left rather than deleted (see :meth:`arm`)."""
        if not self._known:
            armed = await self._storage.getAlarm()
            self._armed = None if armed is None else int(armed)
            self._known = True
        current = self._armed
        # A heartbeat only has to come soon enough: one armed sooner (still ahead) stays.
        if heartbeat and when is not None and current is not None and now < current <= when:
            return current
        # Nothing to wake for, and the armed one is due soon: let it fire (see arm()).
        keep = keep_until is not None and current is not None and current <= keep_until
        if when is None and keep:
            return current
        if when == current:
            return current
        if when is None:
            await self._storage.deleteAlarm()
        else:
            await self._storage.setAlarm(when)
        self._armed = when
        return when


@dataclass(frozen=True)
class AlarmFailures:
    """The durable record of consecutive failed alarm attempts."""

    count: int = 0
    last_error: str | None = None
    gave_up: bool = False


@dataclass(frozen=True)
class AlarmReport:
    """What the guard reports about a failed attempt (to logs, observers, an operator).

    ``retry_at`` is when the alarm is re-armed, ``None`` once the guard gave up.
    """

    attempt: int
    max_failures: int
    error: str
    retry_at: int | None

    @property
    def gave_up(self) -> bool:
        return self.retry_at is None


class FailureStore(Protocol):
    """Durable storage of :class:`AlarmFailures`; ``save`` is durable when it returns."""

    def load(self) -> AlarmFailures: ...

    def save(self, failures: AlarmFailures) -> None: ...


class SqlFailureStore:
    """:class:`FailureStore` in a one-row table of the object's own SQLite database.

    Outside the harness schema on purpose: the harness may be the thing that fails to
    open. Each ``save`` is one autocommitted statement (durable once the object's output
    gate opens, like every other write of the object).
    """

    _TABLE = "perdure_alarm_failures"

    def __init__(self, sql: SqlStorage) -> None:
        self._sql = sql
        self._sql.exec(
            f"CREATE TABLE IF NOT EXISTS {self._TABLE} ("
            " singleton INTEGER PRIMARY KEY CHECK (singleton = 1),"
            " count INTEGER NOT NULL, last_error TEXT, gave_up INTEGER NOT NULL) STRICT"
        ).raw()

    def load(self) -> AlarmFailures:
        rows = list(self._sql.exec(f"SELECT count, last_error, gave_up FROM {self._TABLE}").raw())
        if not rows:
            return AlarmFailures()
        count, last_error, gave_up = rows[0]
        return AlarmFailures(int(count), last_error or None, bool(gave_up))

    def save(self, failures: AlarmFailures) -> None:
        list(
            self._sql.exec(
                f"INSERT INTO {self._TABLE} (singleton, count, last_error, gave_up)"
                " VALUES (1, ?, ?, ?) ON CONFLICT (singleton) DO UPDATE SET"
                " count = excluded.count, last_error = excluded.last_error,"
                " gave_up = excluded.gave_up",
                failures.count,
                failures.last_error,
                int(failures.gave_up),
            ).raw()
        )


def backoff_ms(attempt: int, *, base_ms: int = 2_000, cap_ms: int = 300_000) -> int:
    """The delay before retry ``attempt`` (1-based): 2 s, 4 s, 8 s, … capped at 5 min."""
    return int(min(cap_ms, base_ms * 2 ** max(0, attempt - 1)))


class AlarmGuard:
    """Runs one alarm delivery under the crash-loop bound.

    :meth:`run` records the attempt durably, runs ``work``, and on success clears the
    record. If ``work`` raises, the error is reported and the alarm re-armed after a
    backoff; the error is *not* re-raised (workerd's own retries would stack on ours).
    If the record shows ``max_failures`` consecutive failed attempts already — the
    previous ones may have died with their isolate, never reaching ``except`` — the
    guard gives up: it reports, marks the record, and does not run or re-arm. A request
    to the object (an operator, a client) calls :meth:`reset` to start over.
    """

    def __init__(
        self,
        store: FailureStore,
        slot: AlarmSlot,
        report: Callable[[AlarmReport], None],
        *,
        max_failures: int = 8,
        base_ms: int = 2_000,
        cap_ms: int = 300_000,
    ) -> None:
        if max_failures < 1:
            raise ValueError("max_failures must be at least 1")
        self._store = store
        self._slot = slot
        self._report = report
        self.max_failures = max_failures
        self._base_ms = base_ms
        self._cap_ms = cap_ms

    @property
    def failures(self) -> AlarmFailures:
        return self._store.load()

    def reset(self) -> None:
        if self._store.load() != AlarmFailures():
            self._store.save(AlarmFailures())

    async def run(self, work: Callable[[], Awaitable[None]], now: int) -> bool:
        """One delivery; ``True`` if ``work`` ran and returned. ``work`` re-arms itself."""
        self._slot.consumed()
        record = self._store.load()
        if record.gave_up:
            return False
        if record.count >= self.max_failures:
            # The earlier attempts never came back to say how they ended.
            error = record.last_error or "the alarm handler did not return (isolate lost)"
            self._store.save(AlarmFailures(record.count, error, gave_up=True))
            await self._slot.arm_at(None, now)
            self._report(AlarmReport(record.count, self.max_failures, error, None))
            return False
        attempt = record.count + 1
        # Durable before the work: an attempt that kills the isolate still counts.
        self._store.save(AlarmFailures(attempt, record.last_error))
        try:
            await work()
        except Exception as e:  # reported and retried below, never silently dropped
            error = f"{type(e).__name__}: {e}"
            if attempt >= self.max_failures:
                self._store.save(AlarmFailures(attempt, error, gave_up=True))
                await self._slot.arm_at(None, now)
                self._report(AlarmReport(attempt, self.max_failures, error, None))
                return False
            self._store.save(AlarmFailures(attempt, error))
            retry_at = now + backoff_ms(attempt, base_ms=self._base_ms, cap_ms=self._cap_ms)
            await self._slot.arm_at(retry_at, now)
            self._report(AlarmReport(attempt, self.max_failures, error, retry_at))
            return False
        self._store.save(AlarmFailures())
        return True
