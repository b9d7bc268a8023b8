"""When a recurring schedule's occurrences are: a cron expression in a time zone, or a
fixed interval. Pure: epoch milliseconds in, epoch milliseconds out; no clock is read.

**Cron** (five fields: minute, hour, day of month, month, day of week) is evaluated by
``cronsim`` on the wall clock of an IANA zone (``zoneinfo``), the way Debian's cron
does across daylight-saving changes (docs/design.md § The agent harness, Schedules):

* an expression at a fixed hour and minute (``0 9 * * *``, ``30 2 * * 1-5``) fires once
  a day it matches: a time in the spring gap (02:30 when clocks jump 02:00 → 03:00)
  fires at the first minute after the gap (03:00), a time in the autumn repeat fires
  once, at its first instance (summer time);
* an expression with ``*`` in the minute or hour field (``*/15 * * * *``, ``0 * * * *``)
  follows the real clock: the skipped hour has no occurrences, and the repeated hour's
  run at each of its two real instants.

**Every** (``every_ms``) counts elapsed time from the schedule's ``anchor``: occurrences
at ``anchor + k * every_ms``, k ≥ 1, whatever the wall clock does.

``cronsim`` and ``zoneinfo`` are imported when first needed, not when the harness is
imported: an actor that has no cron schedule does not pay for them at cold start.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING

from core.errors import InvalidInput
from core.readonly import readonly
from core.times import iso_time

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["MIN_EVERY_MS", "Cadence", "parse_every", "zone"]

MIN_EVERY_MS = 60_000
"""The shortest interval (and a cron expression is minute-grained): each occurrence
asks the model, and a host's wake-up is not meant to be finer."""

MAX_EVERY_MS = 366 * 24 * 3600 * 1000
"""No host's timer reaches further (as for reminders)."""

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Missed occurrences counted one by one up to this many; beyond, the latest is found by
# iterating backwards from now (a minutely cron down for a month would be 43,200 steps).
_COUNT_LIMIT = 1000


def zone(name: str) -> tzinfo:
    """The IANA time zone ``name`` (``Europe/Vienna``, ``UTC``); :class:`InvalidInput`
    for a name the zone database does not know."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(name, str) or not name or len(name) > 64 or name.startswith("/"):
        raise InvalidInput(f"unknown time zone {name!r}", field="timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown time zone {name!r}: give an IANA name such as 'Europe/Vienna' or 'UTC'",
            field="timezone",
        ) from None


def parse_every(value: int | float | str) -> int:
    """An interval as milliseconds: seconds as a number (``90``), or a number with a
    unit ``s``, ``m``, ``h`` or ``d`` (``"90s"``, ``"15m"``, ``"1d"``). At least
    :data:`MIN_EVERY_MS`, at most a year; :class:`InvalidInput` otherwise."""
    if isinstance(value, bool):
        raise InvalidInput("every must be seconds or a duration like '15m'", field="every")
    if isinstance(value, int | float):
        ms = round(value * 1000)
    elif isinstance(value, str) and value[:-1].isdigit() and value[-1:] in _UNITS:
        ms = int(value[:-1]) * _UNITS[value[-1]]
    else:
        raise InvalidInput(
            f"every must be seconds or a duration like '90s', '15m', '2h', '1d', not {value!r}",
            field="every",
        )
    if ms < MIN_EVERY_MS:
        raise InvalidInput(f"every must be at least {MIN_EVERY_MS // 1000} seconds", field="every")
    if ms > MAX_EVERY_MS:
        raise InvalidInput("every must be at most 366 days", field="every")
    return ms


def _moment(ms: int, tz: tzinfo) -> datetime:
    return (_EPOCH + timedelta(milliseconds=ms)).astimezone(tz)


def _ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


@readonly(slots=False)
class Cadence:
    """Exactly one of ``cron`` and ``every_ms``; ``tz`` is the zone cron reads its wall
    clock in (and occurrences are shown in); ``anchor`` the epoch ms an interval counts
    from. Build it with :meth:`of` (which checks everything)."""

    cron: str | None
    every_ms: int | None
    tz: tzinfo
    anchor: int

    @classmethod
    def of(
        cls, *, cron: str | None, every: int | float | str | None, timezone: str, anchor: int
    ) -> Cadence:
        """Checked: :class:`InvalidInput` (naming the field) for both or neither of
        ``cron`` and ``every``, a bad expression, an interval out of range, or an
        unknown zone."""
        if (cron is None) == (every is None):
            raise InvalidInput("give exactly one of 'cron' and 'every'", field="cron")
        tz = zone(timezone)
        if every is not None:
            return cls(None, parse_every(every), tz, anchor)
        assert cron is not None
        expression = _check_cron(cron, tz, anchor)
        return cls(expression, None, tz, anchor)

    def next_after(self, ms: int) -> int | None:
        """The first occurrence strictly after ``ms``, or ``None`` when there is none
        (a cron expression that matches no date for 50 years)."""
        if self.every_ms is not None:
            steps = max(0, (ms - self.anchor) // self.every_ms) + 1
            return self.anchor + steps * self.every_ms
        for moment in self._forward(ms):
            return _ms(moment)
        return None

    def upcoming(self, after: int, count: int) -> list[int]:
        """The next ``count`` occurrences after ``after``."""
        found: list[int] = []
        at: int | None = after
        while len(found) < count and at is not None:
            at = self.next_after(at)
            if at is not None:
                found.append(at)
        return found

    def latest(self, due: int, now: int) -> tuple[int, int]:
        """Given an occurrence ``due`` ≤ ``now``: the latest occurrence at or before
        ``now`` and how many occurrences lie between them (missed, not fired)."""
        if self.every_ms is not None:
            missed = max(0, (now - due) // self.every_ms)
            return due + missed * self.every_ms, missed
        latest, missed = due, 0
        for moment in self._forward(due):
            at = _ms(moment)
            if at > now:
                return latest, missed
            if missed == _COUNT_LIMIT:
                break
            latest, missed = at, missed + 1
        return self._before(now, latest), missed

    def _forward(self, ms: int) -> Iterator[datetime]:
        from cronsim import CronSim

        assert self.cron is not None
        return CronSim(self.cron, _moment(ms, self.tz))

    def _before(self, now: int, floor: int) -> int:
        """The latest occurrence at or before ``now`` (backwards from a second later;
        ``floor`` if the backward search finds nothing after it)."""
        from cronsim import CronSim

        assert self.cron is not None
        try:
            found = _ms(next(CronSim(self.cron, _moment(now + 1000, self.tz), reverse=True)))
        except StopIteration:
            return floor
        return found if floor <= found <= now else floor

    def iso(self, ms: int) -> str:
        """``ms`` as ISO-8601 in the schedule's zone, with its offset."""
        return iso_time(ms, self.tz)


def _check_cron(cron: str, tz: tzinfo, anchor: int) -> str:
    from cronsim import CronSim, CronSimError

    if not isinstance(cron, str) or len(cron) > 200:
        raise InvalidInput("cron must be a string of five fields", field="cron")
    expression = " ".join(cron.split())
    if len(expression.split()) != 5:
        raise InvalidInput(
            f"cron takes five fields (minute hour day-of-month month day-of-week), got {cron!r}",
            field="cron",
        )
    try:
        next(CronSim(expression, _moment(anchor, tz)))
    except CronSimError as e:
        raise InvalidInput(f"invalid cron expression {cron!r}: {e}", field="cron") from None
    except StopIteration:
        raise InvalidInput(
            f"cron expression {cron!r} matches no date in the next 50 years", field="cron"
        ) from None
    return expression
