"""What every streaming-only adapter shares: routing by model id, cancellation, and the
answer to deferred polls (these providers never defer)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Generic, Protocol, TypeVar

from core.harness.models import ModelError, ModelInfo, ModelRequest, StreamEvent
from core.jsonvalue import JsonValue
from core.tasks import CancelSignal
from runtimes.models._cancel import until_cancelled

__all__ = ["StreamingModels"]


class _Route(Protocol):
    @property
    def info(self) -> ModelInfo: ...


R = TypeVar("R", bound=_Route)
_NO_EVENTS: tuple[StreamEvent, ...] = ()


class StreamingModels(Generic[R]):
    """Base of adapters that answer by streaming. Subclasses set ``_routes`` and
    implement ``_events(request)``."""

    _routes: Mapping[str, R]

    def info(self, model_id: str) -> ModelInfo | None:
        route = self._routes.get(model_id)
        return route.info if route is not None else None

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        return until_cancelled(self._events(request), signal)

    async def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        """These providers never defer a response: always raises :class:`ModelError`."""
        for event in _NO_EVENTS:
            yield event
        raise ModelError("deferred responses are not supported")

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        """Nothing to cancel: this adapter never answers ``Deferred``."""

    def _events(self, request: ModelRequest) -> AsyncGenerator[StreamEvent, None]:
        raise NotImplementedError
