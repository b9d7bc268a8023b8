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

Q = TypeVar("Q")
T = TypeVar("T")


async def scan_all(
    scan: Callable[[Q, Cursor | None], Awaitable[Page[T]]], query: Q
) -> AsyncIterator[T]:
    """Yield every item of ``scan(query, None)``, then of ``scan(query, page.next)``, until
    a page has no ``next``. ``scan`` is one storage scan (``storage.scan_tasks``) and
    ``query`` its query record (:class:`~core.storage.port.TaskQuery`), whose ``limit`` is
    the page size. Pages are read lazily, one at a time, only as items are consumed;
    errors of a scan (``InvalidCursor``, storage errors) propagate unchanged. Not a
    snapshot: records committed between pages may or may not appear, as with any scan."""
    cursor: Cursor | None = None
    while True:
        page = await scan(query, cursor)
        for item in page.items:
            yield item
        if page.next is None:
            return
        cursor = page.next
