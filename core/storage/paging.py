"""Reading a whole scan: every record of every page, in the scan's order.

Storage scans return one :class:`~core.storage.port.Page` at a time so that no read is
unbounded; callers that need everything (loading live tasks, a conversation's
documents, a usage sum) walk the pages with :func:`scan_all` instead of writing the
cursor loop again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from core.storage.port import Cursor, Page

__all__ = ["scan_all"]

T = TypeVar("T")


async def scan_all(scan: Callable[[Cursor | None], Awaitable[Page[T]]]) -> AsyncIterator[T]:
    """Yield every item of ``scan(None)``, then of ``scan(page.next)``, until a page has
    no ``next``. ``scan`` is one storage scan with its filters and limit fixed (a lambda
    over the cursor). Pages are read lazily, one at a time, only as items are consumed;
    errors of a scan (``InvalidCursor``, storage errors) propagate unchanged. Not a
    snapshot: records committed between pages may or may not appear, as with any scan."""
    cursor: Cursor | None = None
    while True:
        page = await scan(cursor)
        for item in page.items:
            yield item
        if page.next is None:
            return
        cursor = page.next
