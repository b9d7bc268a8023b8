"""The ``Host`` port: what a host gives the actor API for one request."""

from __future__ import annotations

from collections.abc import Awaitable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Protocol, TypeVar, runtime_checkable

from core import Clock
from core.harness import Harness, Registry, WhenBusy
from runtimes.actor.config import ActorConfig

__all__ = ["Host", "JournalingHost"]

T = TypeVar("T")


class Host(Protocol):
    """An actor host as the actor API sees it (local process, Durable Object, Lambda).

    Contract:

    * ``use(actor, create=...)`` yields the actor's open :class:`~core.harness.Harness`
      under the host's single-writer guarantee and holds it open (not parked) for the
      block. ``actor`` is validated first (:class:`~runtimes.actor.InvalidActorId`). An
      actor without storage is created when ``create`` is true, else the call raises
      :class:`~runtimes.actor.UnknownActor` having written nothing. If the block raises
      and this activation created the actor with nothing committed since, the actor is
      gone again before the error propagates. Another writer holding the actor raises
      :class:`~runtimes.actor.ActorLocked`; a host shutting down raises
      :class:`~runtimes.actor.HostClosed`.
    * ``accepting()`` is held while a submission is being accepted: the host may hold its
      answering work back meanwhile, so acceptance is not queued behind it (the pool's
      :class:`~runtimes.actor.pacing.AcceptFirst`).
    * ``until_shutdown(aw)`` awaits ``aw`` unless shutdown begins first:
      ``(True, result)`` or ``(False, None)`` (``aw`` cancelled). Long polls and streams
      wait through it, so a shutdown never waits on a client.
    * ``actor_config`` is what every actor of the host is opened with (the API reads its
      ``default_agent``); ``registry`` the extensions installed (the API validates tool
      and extension names against it before opening anything); ``clock`` the host's.
    * ``actors(after=, limit=)`` lists the host's actors by name, ascending, each after
      ``after``, at most ``limit``, opening none of them; a host that keeps no index of
      its actors raises :class:`~runtimes.actor.ListingUnsupported`.
    * ``start()`` / ``close()`` bracket serving (an ASGI lifespan calls them); closing
      writes nothing a crash would not also leave.

    Nothing here may block the event loop or start a thread: a Durable Object has one
    thread and no ``fcntl``.
    """

    @property
    def actor_config(self) -> ActorConfig: ...

    @property
    def registry(self) -> Registry: ...

    @property
    def clock(self) -> Clock: ...

    def use(self, actor: str, *, create: bool = False) -> AbstractAsyncContextManager[Harness]: ...

    def accepting(self) -> AbstractContextManager[None]: ...

    async def until_shutdown(self, awaitable: Awaitable[T]) -> tuple[bool, T | None]: ...

    async def actors(self, *, after: str | None = None, limit: int = 100) -> list[str]: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


@runtime_checkable
class JournalingHost(Protocol):
    """A host that may accept a new actor's first input before the actor's storage is
    open, into a journal of its own (the local host under a burst of new actors:
    ``runtimes.local.host.journal``). Optional: the API asks ``isinstance`` first.

    Contract:

    * ``journal_input(actor, content, request_id=, when_busy=)`` is called for an input
      to the root conversation, already checked as its admission checks it. It returns
      ``None`` when the host does not journal it (the API then admits it as usual);
      otherwise the input is durably journaled before it returns — under ``request_id``,
      or a request id the host chose, which it returns — and the host moves it into the
      actor (admitting it under that request id, once) before any request uses the
      actor. The API answers it ``mailed`` (``id`` null).
    * ``journaled(actor, request_id)``: whether an input of the actor's root
      conversation waits in the journal under ``request_id`` (a poll by request id that
      found no submission then answers ``mailed``).

    Both run inline on the event loop and must not block it.
    """

    def journal_input(
        self, actor: str, content: str, *, request_id: str | None, when_busy: WhenBusy
    ) -> str | None: ...

    def journaled(self, actor: str, request_id: str) -> bool: ...
