"""Stopping a provider stream promptly when a :class:`CancelSignal` fires.

:func:`until_cancelled` runs the adapter's event generator in a reader task of its own
and hands its events over through a queue. A small watcher task waits for the signal
and cancels the reader: the ``CancelledError`` lands inside whatever network read the
generator is blocked on, the generator's ``finally`` / ``async with`` blocks close the
HTTP response (dropping the connection), and the consumer's iterator just ends. The
provider's iterator is therefore only ever touched by one task, which keeps libraries
with task-bound state (anyio cancel scopes, aiohttp timers) happy.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Generic, TypeVar

from core.tasks import CancelSignal

__all__ = ["until_cancelled"]

T = TypeVar("T")


class _End:
    """The source finished (normally, or because the reader was cancelled)."""


class _Failed:
    def __init__(self, error: Exception) -> None:
        self.error = error


class _Item(Generic[T]):
    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value


async def until_cancelled(
    source: AsyncGenerator[T, None], signal: CancelSignal
) -> AsyncIterator[T]:
    """Yield ``source``'s items until it is exhausted or ``signal`` fires.

    * Signal already set: ``source`` is never started (no request is sent); the iterator
      is empty.
    * Signal fires while ``source`` is opening the request or reading: ``source`` is
      cancelled and closed within one event-loop turn, items it produced but this
      iterator did not yield yet are dropped, and the iterator ends without raising.
      An error that races with the signal is dropped too: the signal wins.
    * ``source`` raises: the exception is re-raised here, after the items before it.
    * The consumer stops early (``aclose()``, ``break``, its own cancellation): ``source``
      is cancelled and closed the same way before this generator finishes.
    """
    if signal.cancelled:
        await source.aclose()
        return
    queue: asyncio.Queue[_Item[T] | _End | _Failed] = asyncio.Queue()
    reader = asyncio.create_task(_read(source, queue))
    watcher = asyncio.create_task(_cancel_on(signal, reader))
    try:
        while True:
            item = await queue.get()
            if signal.cancelled or isinstance(item, _End):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item.value
    finally:
        watcher.cancel()
        # Cancel the reader once only: a second cancel would interrupt the cleanup the
        # watcher's cancel started (closing the response).
        if reader.cancelling() == 0:
            reader.cancel()
        # Wait for that cleanup before returning, so the connection is gone once the
        # caller regains control. asyncio.wait, unlike gather, does not cancel the tasks
        # again if this wait itself is cancelled.
        await asyncio.wait({reader, watcher})


async def _read(
    source: AsyncGenerator[T, None], queue: asyncio.Queue[_Item[T] | _End | _Failed]
) -> None:
    try:
        async for value in source:
            queue.put_nowait(_Item(value))
    except Exception as error:
        queue.put_nowait(_Failed(error))
    finally:
        # On cancellation the CancelledError already unwound the generator's frame
        # (running its cleanup); aclose() makes sure of it in every other case.
        await source.aclose()
        queue.put_nowait(_End())


async def _cancel_on(signal: CancelSignal, reader: asyncio.Task[None]) -> None:
    await signal.wait()
    reader.cancel()
