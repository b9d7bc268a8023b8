"""Helpers for the model adapter tests: one interface over both adapters."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from core.harness.messages import Message, UserMessage
from core.harness.models import (
    ModelError,
    ModelInfo,
    ModelRequest,
    Models,
    StreamDone,
    StreamEvent,
    ThinkingLevel,
    ToolSpec,
)
from core.jsonvalue import JsonObject
from runtimes.models import OpenAICompatibleModels, OpenAIModel, Pricing
from tests.models.fake_openai import FakeOpenAI

Kind = Literal["litellm", "http"]
MODEL_ID = "test/fake-1"
REMOTE_NAME = "fake-1"
INFO = ModelInfo(id=MODEL_ID, context_window=8192, max_tokens=1024)


@dataclass
class Subject:
    """Builds the adapter under test against the fake server, and cleans up after it."""

    kind: Kind
    server: FakeOpenAI

    @contextlib.asynccontextmanager
    async def models(
        self,
        *,
        pricing: Pricing | None = None,
        base_url: str | None = None,
        litellm_model: str | None = None,
        api_key: str = "sk-test",
    ) -> AsyncIterator[Models]:
        url = base_url or self.server.base_url
        if self.kind == "http":
            route = OpenAIModel(
                info=INFO, base_url=url, api_key=api_key, model=REMOTE_NAME, pricing=pricing
            )
            async with OpenAICompatibleModels({MODEL_ID: route}) as http_models:
                yield http_models
            return
        from runtimes.models.litellm import LitellmModel, LitellmModels, close_litellm_clients

        lite = LitellmModel(
            info=INFO,
            model=litellm_model or f"openai/{REMOTE_NAME}",
            api_base=url,
            api_key=api_key,
            pricing=pricing,
        )
        try:
            yield LitellmModels({MODEL_ID: lite})
        finally:
            await close_litellm_clients()


def request(
    messages: list[Message] | None = None,
    *,
    tools: list[ToolSpec] | None = None,
    thinking: ThinkingLevel = "off",
    max_tokens: int | None = None,
    options: JsonObject | None = None,
    model: str = MODEL_ID,
) -> ModelRequest:
    return ModelRequest(
        model=model,
        messages=messages if messages is not None else [UserMessage(content="hi")],
        tools=tools or [],
        thinking=thinking,
        max_tokens=max_tokens,
        options=options or {},
    )


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


async def collect_until_error(
    stream: AsyncIterator[StreamEvent],
) -> tuple[list[StreamEvent], ModelError | None]:
    events: list[StreamEvent] = []
    try:
        async for event in stream:
            events.append(event)
    except ModelError as error:
        return events, error
    return events, None


def done(events: list[StreamEvent]) -> StreamDone:
    finals = [e for e in events if isinstance(e, StreamDone)]
    assert len(finals) == 1, events
    assert events[-1] is finals[0], "StreamDone must be the last event"
    return finals[0]


def of_type(events: list[StreamEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]
