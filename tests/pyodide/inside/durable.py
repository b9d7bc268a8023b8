"""Durable Object storage inside Pyodide: the JS stand-in seen through the real SDK.

``DurableObjectHome`` (JavaScript, ``tests/pyodide/durable_object.mjs``) holds the SQLite
file and the alarm; each :meth:`Isolate.open` is a fresh ``DurableObjectState`` handed to
a real ``workers.DurableObject`` subclass, so ``self.ctx.storage`` is the SDK's own
wrapper around it, as in workerd.
"""

from __future__ import annotations

from typing import Any

from perdure_do_standin import DurableObjectHome  # type: ignore[import-not-found]
from workers import DurableObject  # type: ignore[import-not-found]

from core.storage.sqlite import SqliteStorage
from runtimes.cloudflare.storage import open_durable_object_storage

__all__ = ["Home", "js_request", "main_thread_cpu_ms", "node_cpu_ms"]


class _Probe(DurableObject):  # type: ignore[misc]
    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)


class Home:
    """One Durable Object's durable half, on the host file ``path``."""

    def __init__(self, path: str, name: str = "actor") -> None:
        self.js = DurableObjectHome.new(path, name)

    def state(self) -> Any:
        """A new isolate's ``ctx`` as the SDK hands it to the object (evicts the last)."""
        return _Probe(self.js.open(), {}).ctx

    async def storage(self, *, native: bool = True) -> SqliteStorage:
        """The harness storage in a fresh isolate (evicting the previous one);
        ``native=False`` keeps every call on the SDK's wrapper."""
        return await open_durable_object_storage(self.state().storage, native=native)


def js_request(method: str, path: str, headers: dict[str, str], body: str | None = None) -> Any:
    """A JS ``Request`` for ``path`` on the Worker's origin, as workerd hands one over."""
    from js import Object, Request  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    init: dict[str, Any] = {"method": method, "headers": headers}
    if body is not None:
        init["body"] = body
    return Request.new(
        f"https://perdure.example{path}", to_js(init, dict_converter=Object.fromEntries)
    )


def node_cpu_ms() -> float:
    """The Node process's CPU time in ms (user + system, every thread: V8's compiler and
    collector included). Pyodide's ``time.process_time`` is the wall clock, which on a
    shared machine measures the load as much as the work; CPU time does not."""
    from perdure_cpu import processMs  # type: ignore[import-not-found]  # runner.mjs

    return float(processMs())


def main_thread_cpu_ms() -> float:
    """The CPU time in ms of Node's main thread alone: Python, the stand-in and its
    SQLite, without V8's background compiler and collector threads."""
    from perdure_cpu import mainThreadMs  # type: ignore[import-not-found]  # runner.mjs

    return float(mainThreadMs())
