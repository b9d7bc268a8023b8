"""Error classification shared by both adapters (pure functions, no I/O)."""

from __future__ import annotations

import pytest

from runtimes.models._errors import (
    error_from_status,
    is_context_overflow,
    parse_error_body,
    retry_after_ms,
)

OVERFLOWS = [
    "This model's maximum context length is 128000 tokens. However, your messages resulted "
    "in 130000 tokens. Please reduce the length of the messages.",
    "prompt is too long: 210000 tokens > 200000 maximum",
    "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000",
    "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
    "Requested input exceeds the model's context window",
    "context_length_exceeded",
]
NOT_OVERFLOWS = [
    "max_tokens is too large: 99999. This model supports at most 16384 completion tokens",
    "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000",
    "Incorrect API key provided",
    "Invalid value for 'temperature'",
]


@pytest.mark.parametrize("message", OVERFLOWS)
def test_recognizes_context_overflow_messages(message: str) -> None:
    assert is_context_overflow(message)


@pytest.mark.parametrize("message", NOT_OVERFLOWS)
def test_does_not_mistake_other_errors_for_overflow(message: str) -> None:
    assert not is_context_overflow(message)


def test_overflow_by_code() -> None:
    assert is_context_overflow("whatever", "context_length_exceeded")
    assert not is_context_overflow("whatever", "invalid_api_key")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "2"}, 2000),
        ({"retry-after": "0.25"}, 250),
        ({"retry-after-ms": "1234.5", "retry-after": "9"}, 1235),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10_000),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: int | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_ms(headers, now=now) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"error": {"message": "m", "type": "t", "code": "c"}}', ("m", "c")),
        (b'{"error": {"message": "m", "type": "t"}}', ("m", "t")),
        (b'{"error": "plain"}', ("plain", None)),
        (b'{"message": "top-level"}', ("top-level", None)),
        (b"Bad Gateway", ("Bad Gateway", None)),
        (b"", ("(empty error body)", None)),
    ],
)
def test_parse_error_body(raw: bytes, expected: tuple[str, str | None]) -> None:
    assert parse_error_body(raw) == expected


@pytest.mark.parametrize(
    ("status", "message", "retryable", "overflow"),
    [
        (429, "slow down", True, False),
        (408, "timeout", True, False),
        (409, "conflict", True, False),
        (500, "boom", True, False),
        (502, "bad gateway", True, False),
        (529, "overloaded", True, False),
        (413, "request too large", False, True),
        (400, "maximum context length is 10 tokens", False, True),
        (429, "maximum context length is 10 tokens", True, False),
        (400, "bad parameter", False, False),
        (401, "no key", False, False),
        (403, "forbidden", False, False),
        (404, "no such model", False, False),
        (422, "unprocessable", False, False),
    ],
)
def test_status_table(status: int, message: str, retryable: bool, overflow: bool) -> None:
    error = error_from_status(status, message, headers={"retry-after": "1"})
    assert (error.retryable, error.context_overflow) == (retryable, overflow)
    assert error.retry_after_ms == (1000 if retryable else None)
    assert str(error).startswith(f"HTTP {status}: ")
