"""Times for people: epoch milliseconds (what the core stores and compares) rendered as
ISO-8601 with an explicit zone, for anything a person or a model reads.

The core has no access to the host's local zone (that is OS state), so it renders in
UTC; a host that knows the reader's zone renders again with :func:`iso_time`'s
``zone`` argument.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

__all__ = ["iso_time"]


def iso_time(ms: int, zone: tzinfo | None = None) -> str:
    """``ms`` (epoch milliseconds) as ISO-8601 to the second with its zone, e.g.
    ``2026-12-01T14:52:03Z`` (UTC) or ``2026-12-01T15:52:03+01:00``.

    Milliseconds are kept only when there are some (``...:03.250Z``)."""
    # Arithmetic from the epoch, not fromtimestamp: no platform limits, and no clock read.
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    if zone is not None:
        moment = moment.astimezone(zone)
    spec = "milliseconds" if ms % 1000 else "seconds"
    text = moment.isoformat(timespec=spec)
    return text[:-6] + "Z" if text.endswith("+00:00") else text
