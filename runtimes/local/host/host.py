"""ActorHost: the local host. Actors of one data directory, in this process.

::

    host = ActorHost(HostConfig(data_dir=Path("data"), actor=ActorConfig(models=models)))
    await host.start()
    async with host.use("alice", create=True) as harness:
        root = await harness.root(agent=host.actor_config.default_agent)
        submission = await root.submit("hello")
    await host.close()

The lifecycle (open → activate → use → park, poisoned sessions, a failed first request
leaving nothing behind) is :class:`runtimes.actor.ActorPool`'s, the same on every host.
What is local:

* **storage and one writer**: ``<actor>.sqlite`` under an exclusive ``flock`` on
  ``<actor>.lock`` (:class:`LocalStore`; another process holding it → ``ActorLocked``);
* **eviction** once an actor has been untouched (no request, no commit) for
  ``idle_evict_s`` while no request uses it and nothing runs or is runnable: it is
  parked, its ``next_wake()`` going to the in-process :class:`WakeHeap`;
* **wake**: when the heap's time comes the actor is activated again, which resumes the
  due work (opening and resuming are idempotent, so a spurious wake only costs an open);
* **recovery at start**: a look at every stored actor, to wake those a crash left due;
* **the admission journal** (:mod:`runtimes.local.host.journal`): under a burst of new
  actors, a new actor's first input is accepted before its file is open and moved into
  it by the activation that follows (:meth:`ActorHost.activated`).

Everything it keeps in memory (the heap, idle times) can be lost: deadlines live in
storage, and ``recover_on_start`` re-derives them after a crash.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.errors import ConversationBusy, InvalidInput, RequestIdConflict
from core.harness import Harness, WhenBusy
from core.tasks import Inspection
from runtimes.actor import ActorLocked, ActorPool, OpenActor, UnknownActor, check_actor_id
from runtimes.actor.clock import SystemClock
from runtimes.local.host.config import HostConfig
from runtimes.local.host.journal import AdmissionJournal, JournaledInput
from runtimes.local.host.store import LocalStore
from runtimes.local.host.wakes import WakeHeap

T = TypeVar("T")

__all__ = ["JOURNAL_RETRY_MS", "ActorHost"]

JOURNAL_RETRY_MS = 1_000
"""An actor with journaled input that another process holds is tried again this much
later (that process has no access to this host's journal)."""


class ActorHost(ActorPool):
    """Actors of one data directory, in this process. See the module docstring.

    All methods run on the event loop that called :meth:`start`.
    """

    def __init__(self, config: HostConfig) -> None:
        self._store = LocalStore(config.data_dir, synchronous=config.synchronous)
        super().__init__(self._store, config.actor, clock=config.clock or SystemClock())
        self.config = config
        self._idle_ms = int(config.idle_evict_s * 1000)
        self._wakes = WakeHeap(self.clock, self._on_wake)
        self._waking: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Create the data directory and open the admission journal (unless another host
        process holds it, or it is turned off), activating every actor with journaled
        input in the background; with ``recover_on_start``, look at every stored actor
        in the background and wake those whose work is due (see :meth:`recover`)."""
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config.journal_when_opening is not None and self.config.synchronous == "NORMAL":
            try:
                journal = await asyncio.to_thread(AdmissionJournal.open, self.config.data_dir)
            except ActorLocked:
                journal = None  # another host process serves this directory's journal
            self._store.journal = journal
            for name in sorted(journal.actors if journal is not None else ()):
                self._on_wake(name)  # accepted before a crash or a close: move it in
        if self.config.recover_on_start:
            self.spawn(self.recover())

    async def close(self) -> None:
        """As :meth:`ActorPool.close`; then the journal is closed (its rows stay)."""
        try:
            await super().close()
        finally:
            journal, self._store.journal = self._store.journal, None
            if journal is not None:
                await asyncio.to_thread(journal.close)

    def closing_started(self) -> None:
        self._wakes.close()  # the deadlines are in storage

    @property
    def wakes(self) -> dict[str, int]:
        """Evicted actors with a durable deadline: actor → wake time (epoch ms); an actor
        whose wake fired stays listed until it is open again (no moment where it is
        neither open nor known to wake)."""
        return {**self._waking, **self._wakes.pending()}

    # ------------------------------------------------------------------ pool hooks

    def admitted(self, entry: OpenActor) -> None:
        # The live scheduler owns its timers from now on.
        self._wakes.discard(entry.name)

    def parked(self, name: str, wake: int | None) -> None:
        if wake is not None:
            self._wakes.set(name, wake)

    def touched(self, entry: OpenActor) -> None:
        self._arm_eviction(entry)

    async def activated(self, entry: OpenActor) -> None:
        """Move the actor's journaled input into it, before any request uses it: each
        input admitted under its request id (so a move repeated after a crash answers
        the original), then deleted from the journal. An input the actor refuses (it
        was checked before it was journaled, so only a bug gets here) is reported and
        dropped; any other failure is reported and the input stays for the next
        activation."""
        journal = self._store.journal
        if journal is None or not journal.has(entry.name):
            return
        try:
            for item in journal.pending(entry.name):
                root = await entry.harness.root(agent=self.actor_config.default_agent, defer=True)
                try:
                    await root.submit(
                        item.content, request_id=item.request_id, when_busy=item.when_busy
                    )
                except (InvalidInput, ConversationBusy, RequestIdConflict) as refused:
                    self.report(entry.name, refused)
                journal.remove(item)
        except Exception as error:
            self.report(entry.name, error)

    # ------------------------------------------------------------------ the journal

    def journal_input(
        self, actor: str, content: str, *, request_id: str | None, when_busy: WhenBusy
    ) -> str | None:
        """Journal a new actor's first input when actor opens are already under way (see
        :class:`~runtimes.actor.host.JournalingHost` and ``HostConfig.journal_when_opening``)
        and start its activation; the request id it was journaled under, or ``None``
        (not journaled: the actor is open, stored or already has journaled input, or
        the host is not busy opening actors)."""
        name = check_actor_id(actor)
        journal = self._store.journal
        threshold = self.config.journal_when_opening
        if (
            journal is None
            or threshold is None
            or self._store.opening < threshold
            or self.closing
            or self.current(name) is not None
            or journal.has(name)
            or self._store.has_file(name)
        ):
            return None
        chosen = request_id if request_id is not None else f"journal-{uuid.uuid4().hex}"
        journal.add(JournaledInput(name, chosen, content, when_busy))
        self._on_wake(name)
        return chosen

    def journaled(self, actor: str, request_id: str) -> bool:
        journal = self._store.journal
        return journal is not None and any(
            item.request_id == request_id for item in journal.pending(actor)
        )

    # ------------------------------------------------------------------ local duties

    async def recover(self) -> None:
        """Look at every actor stored in the data directory that is not open: open it
        without resuming, read ``next_wake()``, and keep it open and resumed if work is
        due now, else close it and put its deadline (if any) in the wake heap.

        Actors held by another process are skipped; errors are reported, not raised.
        """
        for db in sorted(self.config.data_dir.glob("*.sqlite")):
            if self.closing:
                return
            try:
                name = check_actor_id(db.stem)
            except ValueError:
                continue
            if self._store.journal is not None and self._store.journal.has(name):
                continue  # start() activates it
            try:
                async with self.transition(name):
                    if self.current(name) is None and not self.closing:
                        await self._probe(name)
            except (ActorLocked, UnknownActor):
                continue
            except Exception as error:
                self.report(name, error)

    async def inspect(self, actor: str) -> Inspection:
        """The live tasks of ``actor``: from its harness if open, else by opening it
        without resuming (nothing runs) and closing it again."""

        async def look(harness: Harness) -> Inspection:
            return harness.inspect()

        return await self.look(actor, look)

    async def look(self, actor: str, read: Callable[[Harness], Awaitable[T]]) -> T:
        """``read(harness)`` of ``actor``, as :meth:`inspect` opens it (nothing runs)."""
        name = check_actor_id(actor)
        async with self.transition(name):
            entry = self.current(name)
            if entry is not None:
                return await read(entry.harness)
            opened = await self.open_actor(name, create=False)
            try:
                return await read(opened.harness)
            finally:
                await opened.close()

    # ------------------------------------------------------------------ internals

    async def _probe(self, name: str) -> None:
        entry = await self.open_actor(name, create=False)
        wake = entry.harness.next_wake()
        if wake is not None and wake <= self.clock.now():
            self._arm_eviction(self.admit(entry))
            return
        if wake is not None:
            # Armed before closing, so the actor is always open or in the heap; a fire
            # meanwhile waits for this transition to end.
            self._wakes.set(name, wake)
        await entry.close()

    def _arm_eviction(self, entry: OpenActor) -> None:
        """Arm the actor's idle check at ``touched + idle`` unless one is pending (it
        re-arms itself lazily when it fires early)."""
        if entry.timer is not None or entry.closed or self.closing:
            return
        entry.timer = self.clock.call_at(
            entry.touched + self._idle_ms, lambda: self._on_idle_timer(entry)
        )

    def _on_idle_timer(self, entry: OpenActor) -> None:
        entry.timer = None
        if entry.closed or self.closing:
            return
        if self.clock.now() < entry.touched + self._idle_ms:
            self._arm_eviction(entry)
        else:
            self.spawn(self._idle_check(entry))

    async def _idle_check(self, entry: OpenActor) -> None:
        async with self.transition(entry.name):
            if self.current(entry.name) is not entry or self.closing:
                return
            if self.parkable(entry, idle_ms=self._idle_ms):
                await self.park(entry)
                return
        # Busy: look again one idle period from now (commits may also re-arm it sooner).
        entry.touched = max(entry.touched, self.clock.now())
        self._arm_eviction(entry)

    def _on_wake(self, name: str) -> None:
        self._waking[name] = self.clock.now()
        self.spawn(self._wake_job(name))

    async def _wake_job(self, name: str) -> None:
        try:
            await self.wake(name)
        except ActorLocked:
            # Another process owns the actor now; its host wakes it, but only this one
            # can move the actor's journaled input in: try again later.
            journal = self._store.journal
            if journal is not None and journal.has(name) and not self.closing:
                self._wakes.set(name, self.clock.now() + JOURNAL_RETRY_MS)
        except Exception as error:
            self.report(name, error)
        finally:
            self._waking.pop(name, None)
