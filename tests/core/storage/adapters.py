"""Storage providers for tests: every adapter the conformance kit runs against."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from core.storage import MemoryState, MemoryStorage, Storage
from core.testing.wrappers import ReopeningStorage
from runtimes.local.sqlite import open_sqlite_storage

Provider = Callable[[Path], AbstractAsyncContextManager[Storage]]


@asynccontextmanager
async def memory(_: Path) -> AsyncIterator[Storage]:
    storage = MemoryStorage()
    try:
        yield storage
    finally:
        await storage.close()


@asynccontextmanager
async def memory_reopening(_: Path) -> AsyncIterator[Storage]:
    state = MemoryState()

    async def reopen() -> Storage:
        return MemoryStorage(state)

    storage = await ReopeningStorage.open(reopen)
    try:
        yield storage
    finally:
        await storage.close()


def _sqlite(driver: str, reopening: bool) -> Provider:
    @asynccontextmanager
    async def provide(tmp: Path) -> AsyncIterator[Storage]:
        path = tmp / "actor.sqlite"

        async def reopen() -> Storage:
            return await open_sqlite_storage(path, driver=driver)  # type: ignore[arg-type]

        storage: Storage = await (ReopeningStorage.open(reopen) if reopening else reopen())
        try:
            yield storage
        finally:
            await storage.close()

    return provide


PROVIDERS: dict[str, Provider] = {
    "memory": memory,
    "memory-reopening": memory_reopening,
    "sqlite3": _sqlite("sqlite3", False),
    "aiosqlite": _sqlite("aiosqlite", False),
    "aiosqlite-reopening": _sqlite("aiosqlite", True),
}
