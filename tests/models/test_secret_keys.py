"""The model adapters never log or echo their API key: not in error messages, reprs,
log records at DEBUG (litellm's included) or anything printed to stdout/stderr."""

from __future__ import annotations

import logging

import pytest

from core.tasks.signal import CancelSignal
from tests.models.fake_openai import Fail, FakeOpenAI
from tests.models.support import Subject, collect_until_error, request
from tests.remote_env.support import free_port

KEY = "sk-perdure-leak-canary-0123456789abcdef"


@pytest.mark.parametrize(
    "reply",
    [
        Fail(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_key"}}),
        Fail(500, {"error": {"message": "boom", "type": "server_error"}}),
        Fail(400, {"error": {"message": "max_tokens is too large: 99999"}}),
        None,  # nothing listens at the base URL
    ],
    ids=["401", "500", "400", "unreachable"],
)
async def test_the_api_key_never_appears_in_errors_or_logs(
    subject: Subject,
    server: FakeOpenAI,
    reply: Fail | None,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    base_url = f"http://127.0.0.1:{free_port()}/v1" if reply is None else None
    if reply is not None:
        server.script(reply)
    async with subject.models(api_key=KEY, base_url=base_url) as models:
        _, error = await collect_until_error(models.stream(request(), CancelSignal()))
        shown = f"{models!r}"
    assert error is not None
    if reply is not None:  # the key did reach the provider: the canary is live
        assert KEY in server.received[-1].headers.get("authorization", "")
    printed = capfd.readouterr()
    for text in (str(error), repr(error), repr(error.__dict__), shown, caplog.text, *printed):
        assert KEY not in text
