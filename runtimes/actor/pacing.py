"""Acceptance first: answering work yields to submissions being accepted, on one loop.

asyncio runs ready callbacks first come, first served, one loop iteration after another.
Accepting a submission (the HTTP request, the admission commit, the ``202``) takes a few
iterations, and in each it waits behind every ready step of every actor's answering work.
A host answering a hundred conversations at once then makes each acceptance wait behind
a hundred rounds' steps, several times over: the local host's acceptance p50 was about a
third of a client's whole submit-and-answer cycle (``tests/bench/suite.py --only host``,
where a profile showed the admission commit itself at ~0.2 ms of a ~90 ms acceptance).

:class:`AcceptFirst` is the host's policy against that, applied where answering work
starts a round, the model request (:class:`PacedModels` wraps the host's models):

* while a submission is being accepted (:meth:`AcceptFirst.accepting`), a model request
  waits; it goes when no acceptance is left, and at the latest ``max_defer_s`` after it
  asked, so a stream of submissions never starves the answers;
* otherwise at most ``batch`` model requests start per loop iteration (the others wait for
  the next one), so no iteration holds hundreds of rounds' steps ahead of the next
  acceptance.

A wait only delays a request; nothing is dropped, reordered within a conversation (each
runs one request at a time) or written. It uses the loop's time and ``call_soon`` /
``call_later`` only, so every host (Pyodide included) can use it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from core import JsonValue
from core.harness import ModelInfo, ModelRequest, Models
from core.harness.models import StreamEvent
from core.tasks import CancelSignal

__all__ = ["AcceptFirst", "PacedModels"]


class AcceptFirst:
    """Holds answering work back while submissions are being accepted (module docstring).

    All methods run on one event loop (the host's)."""

    # Why 4: each request started goes on for a few loop iterations (the answer's
    # steps, its commit, the long polls it settles), and an acceptance waits about two
    # iterations. With a hundred clients in a closed loop (the suite's host workload),
    # a batch of 16 made iterations of ~25-40 ms (acceptance p50 ~45 ms); 4 keeps them
    # near 10 ms (p50 ~13 ms) for ~10% fewer answers per second while the host's CPU
    # is the bottleneck. It bounds only how many requests start per iteration: a
    # request waiting on its model's network answer holds no part of it.
    def __init__(self, *, batch: int = 4, max_defer_s: float = 0.05) -> None:
        if batch < 1 or max_defer_s < 0:
            raise ValueError("batch must be >= 1 and max_defer_s >= 0")
        self.batch = batch
        self.max_defer_s = max_defer_s
        self._accepting = 0
        self._waiting: deque[tuple[float, asyncio.Future[None]]] = deque()
        self._budget = batch  # starts left in this loop iteration
        self._refill: asyncio.Handle | None = None
        self._pump: asyncio.TimerHandle | asyncio.Handle | None = None

    @property
    def accepting_now(self) -> int:
        """Submissions being accepted right now."""
        return self._accepting

    @property
    def waiting(self) -> int:
        """Model requests waiting for their turn."""
        return len(self._waiting)

    @contextmanager
    def accepting(self) -> Iterator[None]:
        """A submission is being accepted for the block's duration."""
        self._accepting += 1
        try:
            yield
        finally:
            self._accepting -= 1
            if not self._accepting and self._waiting:
                self._schedule(0.0)

    async def turn(self) -> None:
        """Return when answering work may go on (at once, without suspending, when no
        acceptance is under way and this iteration's budget is not spent)."""
        loop = asyncio.get_running_loop()
        if not self._accepting and not self._waiting and self._budget > 0:
            self._spend(loop)
            return
        ready: asyncio.Future[None] = loop.create_future()
        self._waiting.append((loop.time(), ready))
        self._schedule(self.max_defer_s if self._accepting else 0.0)
        await ready

    def _spend(self, loop: asyncio.AbstractEventLoop) -> None:
        self._budget -= 1
        if self._refill is None:  # runs after the callbacks ready now: the next iteration
            self._refill = loop.call_soon(self._refilled)

    def _refilled(self) -> None:
        self._refill = None
        self._budget = self.batch

    def _schedule(self, delay: float) -> None:
        if self._pump is not None:
            if delay > 0:
                return  # one is armed already, as soon or sooner
            self._pump.cancel()
        loop = asyncio.get_running_loop()
        self._pump = (
            loop.call_later(delay, self._release) if delay > 0 else loop.call_soon(self._release)
        )

    def _release(self) -> None:
        """Let up to a budget of waiters go: when no acceptance is under way, or when the
        oldest has waited ``max_defer_s``; arm the next release if some are left."""
        self._pump = None
        loop = asyncio.get_running_loop()
        while self._waiting and self._waiting[0][1].done():
            self._waiting.popleft()  # cancelled while waiting
        if not self._waiting:
            return
        if self._accepting:
            waited = loop.time() - self._waiting[0][0]
            if waited < self.max_defer_s:
                self._schedule(self.max_defer_s - waited)
                return
        released = 0
        while self._waiting and released < self._budget:
            _asked, ready = self._waiting.popleft()
            if not ready.done():
                ready.set_result(None)
                released += 1
        for _ in range(released):
            self._spend(loop)
        if self._waiting:
            self._schedule(0.0)


class PacedModels:
    """The host's :class:`~core.harness.Models`, each request (and deferred poll) first
    waiting for its :meth:`AcceptFirst.turn`."""

    def __init__(self, models: Models, pacer: AcceptFirst) -> None:
        self.models = models
        self.pacer = pacer

    def info(self, model_id: str) -> ModelInfo | None:
        return self.models.info(model_id)

    async def stream(
        self, request: ModelRequest, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        await self.pacer.turn()
        async for event in self.models.stream(request, signal):
            yield event

    async def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        await self.pacer.turn()
        async for event in self.models.fetch(model_id, handle, signal):
            yield event

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        await self.models.cancel_deferred(model_id, handle)
