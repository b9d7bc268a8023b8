"""WaiterRegistry: callers waiting, by key, for something a later commit decides.

The scheduler (tasks and idleness) and the harness (submissions and conversations) keep
their waiting callers here. A registry comes from :meth:`Session.waiters`, which fails
every registry it handed out when an uncertain storage failure poisons the session:
nothing would ever settle those waits. Whoever owns a registry fails it on close.

Cancelling a wait cancels only the wait (its future), never what it waits for.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from core.clock import Clock
from core.errors import copy_error

__all__ = ["WaiterRegistry"]

K = TypeVar("K")
V = TypeVar("V")


class WaiterRegistry(Generic[K, V]):
    """Futures by key: :meth:`wait` adds one, :meth:`settle` resolves a key's futures,
    :meth:`fail_all` fails every one (each with its own copy of the error)."""

    def __init__(self) -> None:
        self._waiting: dict[K, list[asyncio.Future[V]]] = {}

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def waited(self) -> list[K]:
        """The keys someone waits on now (a snapshot: settling while iterating is safe)."""
        return list(self._waiting)

    async def wait(
        self,
        key: K,
        *,
        clock: Clock | None = None,
        deadline: int | None = None,
        expired: str = "the wait timed out",
    ) -> V:
        """Wait until ``key`` is settled and return its value; with ``clock`` and
        ``deadline`` (epoch ms), raise ``TimeoutError(expired)`` once the clock passes it.
        The future is registered before this coroutine first suspends."""
        fut: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(fut)
        timer = None
        if clock is not None and deadline is not None:

            def expire() -> None:
                if not fut.done():
                    fut.set_exception(TimeoutError(expired))

            timer = clock.call_at(deadline, expire)
        try:
            return await fut
        finally:
            if timer is not None:
                timer.cancel()
            waiting = self._waiting.get(key)
            if waiting is not None and fut in waiting:
                waiting.remove(fut)
                if not waiting:
                    del self._waiting[key]

    def settle(self, key: K, value: V) -> None:
        """Resolve every wait on ``key`` with ``value`` (nothing if no one waits)."""
        for fut in self._waiting.pop(key, []):
            if not fut.done():
                fut.set_result(value)

    def fail_all(self, error: BaseException) -> None:
        """Fail every wait: closed or poisoned, nothing will settle them any more."""
        waiting, self._waiting = self._waiting, {}
        for futures in waiting.values():
            for fut in futures:
                if not fut.done():
                    fut.set_exception(copy_error(error))
