"""Several :class:`Models` adapters behind one, chosen by model-id prefix.

Agents store a single model id string (``"faux/faux-1"``, ``"openai/gpt-4o-mini"``); a
host that serves models through more than one adapter hands the harness a
:class:`ModelRouter`::

    ModelRouter({"faux/": faux}, default=litellm_models)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING

from core.harness.models import ModelError, ModelInfo, ModelRequest, Models, StreamEvent
from core.jsonvalue import JsonValue
from core.tasks import CancelSignal

__all__ = ["ModelRouter"]


class ModelRouter:
    """:class:`Models` that delegates each call to the adapter owning the model id.

    ``routes`` maps id prefixes to adapters; the longest matching prefix wins, and ids
    no prefix matches go to ``default``. Without a route and without a default, ``info``
    answers ``None`` (the harness reports ``no_model``) and ``stream`` / ``fetch`` raise a
    non-retryable :class:`ModelError`. The router adds no behaviour of its own: events,
    errors and cancellation are the chosen adapter's.
    """

    def __init__(self, routes: Mapping[str, Models], *, default: Models | None = None) -> None:
        for prefix in routes:
            if not isinstance(prefix, str) or not prefix:
                raise ValueError(f"route prefixes must be non-empty strings, got {prefix!r}")
        # Longest first, so "openai/o1" can override "openai/".
        self._routes = sorted(routes.items(), key=lambda item: len(item[0]), reverse=True)
        self._default = default

    def adapter(self, model_id: str) -> Models | None:
        """The adapter that serves ``model_id``, or ``None``."""
        for prefix, models in self._routes:
            if model_id.startswith(prefix):
                return models
        return self._default

    def info(self, model_id: str) -> ModelInfo | None:
        models = self.adapter(model_id)
        return models.info(model_id) if models is not None else None

    def stream(self, request: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        models = self.adapter(request.model)
        if models is None:
            return _no_route(request.model)
        return models.stream(request, signal)

    def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        models = self.adapter(model_id)
        if models is None:
            return _no_route(model_id)
        return models.fetch(model_id, handle, signal)

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        models = self.adapter(model_id)
        if models is not None:
            await models.cancel_deferred(model_id, handle)


_NO_EVENTS: tuple[StreamEvent, ...] = ()


async def _no_route(model_id: str) -> AsyncIterator[StreamEvent]:
    for event in _NO_EVENTS:
        yield event
    raise ModelError(f"no model adapter serves {model_id!r}")


if TYPE_CHECKING:  # mypy proves the adapter satisfies its port

    def _conforms(adapter: ModelRouter) -> Models:
        return adapter
