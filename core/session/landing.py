"""Landing a commit: run it to its end whatever happens to the committer.

Once a commit's callback has returned, its storage commit must land (or fail) and be
adopted even if the committer is cancelled meanwhile. A task of its own, awaited
shielded, does that at the cost of a task and two loop hops per commit; most commits
(the inline sqlite3 facade, memory storage) never suspend, and cancellation can reach a
coroutine only where it suspends. So the landing starts on the committer's stack and
moves to a shielded task of its own only if it suspends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["land_shielded"]


async def land_shielded(landing: Coroutine[Any, Any, None]) -> None:
    """Run ``landing`` to its end even if the caller is cancelled meanwhile.

    It starts on the caller's stack: a storage whose commit does not suspend (the
    inline sqlite3 facade) lands it right here, with no task of its own and no loop hop
    (two hops and a task per commit otherwise). Cancellation can reach a coroutine only
    where it suspends, so until then there is nothing to shield; if it does suspend, the
    rest runs in a task of its own that the caller awaits shielded, as before.
    """
    try:
        waiting_for = landing.send(None)
    except StopIteration:
        return
    await asyncio.shield(asyncio.ensure_future(_Resumed(landing, waiting_for)))


class _Resumed:
    """The rest of a coroutine that has run up to its first suspension, on
    ``waiting_for``: the task awaiting this drives it on exactly as it would have."""

    __slots__ = ("_coro", "_waiting_for")

    def __init__(self, coro: Coroutine[Any, Any, None], waiting_for: object) -> None:
        self._coro = coro
        self._waiting_for = waiting_for

    def __await__(self) -> Generator[object, None, None]:
        pending = self._waiting_for
        while True:
            try:
                yield pending
            except BaseException as e:  # thrown into the task (its cancellation): pass it on
                try:
                    pending = self._coro.throw(e)
                except StopIteration:
                    return
                continue
            try:
                pending = self._coro.send(None)
            except StopIteration:
                return
