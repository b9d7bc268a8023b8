"""ModelRouter: one Models over several, by model-id prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from core.harness.messages import AssistantMessage, TextBlock
from core.harness.models import (
    ModelError,
    ModelInfo,
    ModelRequest,
    StreamDone,
    StreamEvent,
    StreamStart,
)
from core.jsonvalue import JsonValue
from core.tasks.signal import CancelSignal
from runtimes.models import ModelRouter
from tests.models.support import collect, collect_until_error, request


class Named:
    """A stub adapter that answers with its own name and records calls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cancelled: list[tuple[str, JsonValue]] = []

    def info(self, model_id: str) -> ModelInfo | None:
        return ModelInfo(id=model_id, context_window=100, max_tokens=10)

    async def stream(self, req: ModelRequest, signal: CancelSignal) -> AsyncIterator[StreamEvent]:
        yield StreamStart(req.model)
        yield StreamDone(AssistantMessage(content=[TextBlock(text=self.name)]))

    async def fetch(
        self, model_id: str, handle: JsonValue, signal: CancelSignal
    ) -> AsyncIterator[StreamEvent]:
        yield StreamDone(AssistantMessage(content=[TextBlock(text=f"{self.name}:{handle}")]))

    async def cancel_deferred(self, model_id: str, handle: JsonValue) -> None:
        self.cancelled.append((model_id, handle))


async def answer(router: ModelRouter, model: str) -> str:
    events = await collect(router.stream(request(model=model), CancelSignal()))
    final = events[-1]
    assert isinstance(final, StreamDone)
    return final.message.text


async def test_longest_prefix_wins_and_default_takes_the_rest() -> None:
    faux, o1, rest = Named("faux"), Named("o1"), Named("rest")
    router = ModelRouter({"faux/": faux, "openai/o1": o1, "openai/": rest}, default=rest)
    assert await answer(router, "faux/faux-1") == "faux"
    assert await answer(router, "openai/o1-mini") == "o1"
    assert await answer(router, "openai/gpt-4o") == "rest"
    assert await answer(router, "anthropic/claude") == "rest"
    assert router.adapter("faux/x") is faux


async def test_fetch_and_cancel_go_to_the_owner() -> None:
    faux, rest = Named("faux"), Named("rest")
    router = ModelRouter({"faux/": faux}, default=rest)
    events = await collect(router.fetch("faux/1", "h1", CancelSignal()))
    final = events[-1]
    assert isinstance(final, StreamDone) and final.message.text == "faux:h1"
    await router.cancel_deferred("other/2", "h2")
    assert rest.cancelled == [("other/2", "h2")] and faux.cancelled == []


async def test_without_a_route() -> None:
    router = ModelRouter({"faux/": Named("faux")})
    assert router.info("openai/gpt-4o") is None
    assert router.info("faux/1") is not None
    _, error = await collect_until_error(
        router.stream(request(model="openai/gpt-4o"), CancelSignal())
    )
    assert isinstance(error, ModelError) and not error.retryable
    _, error = await collect_until_error(router.fetch("openai/gpt-4o", None, CancelSignal()))
    assert isinstance(error, ModelError)
    await router.cancel_deferred("openai/gpt-4o", None)


def test_rejects_empty_prefixes() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        ModelRouter({"": Named("x")})
