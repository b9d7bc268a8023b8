"""How a failed provider request becomes a :class:`ModelError`.

Both adapters classify the same way, from what the provider said (status code, error
body, headers):

* 408, 409, 425, 429 and every 5xx (529 "overloaded" included) are worth retrying, with
  the provider's own ``retry-after-ms`` / ``retry-after`` hint when it gave one;
* a 400, 413 or 422 whose message or code says the prompt did not fit the context window
  is a context overflow (the harness compacts and retries once); a 413 always is, since
  only a smaller request can succeed;
* everything else (auth, permissions, unknown model, bad parameters) is neither: retrying
  the same request cannot help.

Transport failures (connection refused or reset, timeouts, a stream cut short) are
retryable; the adapters map their own exception types onto :func:`transport_error`.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from core.harness.models import ModelError

__all__ = [
    "RETRYABLE_STATUS",
    "error_from_status",
    "is_context_overflow",
    "parse_error_body",
    "retry_after_ms",
    "transport_error",
]

RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_OVERFLOW_STATUS = frozenset({400, 413, 422})
_MAX_MESSAGE = 2000

# What providers say when the prompt is larger than the window. The patterns are
# deliberately specific: "max_tokens is too large" (a bad parameter) and "Request too
# large ... tokens per min" (a rate limit) must not match, compaction cannot fix them.
_OVERFLOW_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"context[ _-]?length[ _-]?exceeded",
        r"maximum context length",
        r"context[ _-]?window[ _-]?exceeded",
        r"exceeds? (the )?(model'?s? )?context (window|length|limit)",
        r"context (window|limit) (of|is) .* exceeded",
        r"prompt is too long",
        r"input (length|is) too long",
        r"too many (input |prompt )?tokens",
        r"exceeds? (the )?maximum (number of )?(input |prompt )?tokens",
        r"input length and `?max_tokens`? exceed context limit",
        r"reduce the length of the messages",
    )
]
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "context_window_exceeded"})


def is_context_overflow(message: str, code: str | None = None) -> bool:
    """Whether a provider's error message or code says the prompt exceeded the window."""
    if code is not None and code.lower() in _OVERFLOW_CODES:
        return True
    return any(p.search(message) for p in _OVERFLOW_PATTERNS)


def parse_error_body(raw: bytes | str) -> tuple[str, str | None]:
    """``(message, code)`` from an error body: OpenAI's ``{"error": {...}}`` or plain text."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    try:
        body: Any = json.loads(text)
    except ValueError:
        return _clip(text.strip()) or "(empty error body)", None
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, str):
        return _clip(error), None
    if isinstance(error, dict):
        message = error.get("message") or error.get("detail") or json.dumps(error)
        code = error.get("code") or error.get("type")
        return _clip(str(message)), (str(code) if code is not None else None)
    return _clip(text.strip()), None


def retry_after_ms(headers: Mapping[str, str], *, now: float | None = None) -> int | None:
    """The provider's retry hint in milliseconds: ``retry-after-ms``, else ``retry-after``
    (delta seconds or an HTTP date). ``None`` when absent or unreadable."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        value = _number(raw_ms)
        if value is not None:
            return max(0, math.ceil(value))
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return max(0, math.ceil(seconds * 1000))
    try:
        when = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    current = time.time() if now is None else now
    return max(0, math.ceil((when.timestamp() - current) * 1000))


def error_from_status(
    status: int,
    message: str,
    *,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
    overflow: bool = False,
) -> ModelError:
    """Classify an HTTP error answer. ``overflow`` forces a context overflow (when the
    caller already knows, e.g. from litellm's exception type)."""
    text = f"HTTP {status}: {message}"
    if (
        overflow
        or status == 413
        or (status in _OVERFLOW_STATUS and is_context_overflow(message, code))
    ):
        return ModelError(text, context_overflow=True)
    if status in RETRYABLE_STATUS or 500 <= status <= 599:
        return ModelError(
            text, retryable=True, retry_after_ms=retry_after_ms(headers) if headers else None
        )
    return ModelError(text)


def transport_error(what: str, error: BaseException) -> ModelError:
    """A failure below HTTP (connect, read, timeout, cut stream): retryable."""
    detail = str(error) or type(error).__name__
    return ModelError(f"{what}: {_clip(detail)}", retryable=True)


def _number(raw: str) -> float | None:
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE] + "…"
