"""Fixtures for the model adapter tests: one fake OpenAI server for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.models.fake_openai import FakeOpenAI
from tests.models.support import Subject


@pytest.fixture(scope="session")
def openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server(openai_server: FakeOpenAI) -> Iterator[FakeOpenAI]:
    openai_server.reset()
    yield openai_server
    openai_server.reset()


@pytest.fixture(params=["litellm", "http"])
def subject(request: pytest.FixtureRequest, server: FakeOpenAI) -> Subject:
    return Subject(kind=request.param, server=server)
