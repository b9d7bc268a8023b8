"""The checks both edge hosts' settings readers apply to what an operator configured.

The Worker reads ``env`` (``runtimes.cloudflare.settings``) and the Lambda function its
environment (``runtimes.aws.config``); they name a setting differently ("var MODEL",
"template parameter ModelBaseUrl (PERDURE_MODEL_BASE_URL)") and keep secrets
differently, but judge a value by the same rules. Each check appends one line naming the
setting by the ``label`` its host gives it — never quoting a secret — to ``problems``,
so a reader reports every mistake of a deployment at once.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_TOKENS",
    "check_model_limits",
    "check_service_url",
    "integer_setting",
]

DEFAULT_CONTEXT_WINDOW = 128_000
DEFAULT_MAX_TOKENS = 8_192
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def integer_setting(
    text: str | None, label: str, *, default: int, minimum: int, problems: list[str]
) -> int:
    """``text`` as an integer of at least ``minimum``; ``default`` when unset or invalid
    (an invalid value is reported)."""
    if text is None:
        return default
    if not text.isdigit() or int(text) < minimum:
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        problems.append(f"{label} must be {wanted}, got {text!r}")
        return default
    return int(text)


def check_service_url(label: str, url: str, problems: list[str]) -> None:
    """A model or sandbox server's URL: http(s) with a host, and https unless the host
    is loopback, since a bearer credential travels with every request."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(f"{label} must be an http(s) URL, got {url!r}")
    elif parts.scheme != "https" and parts.hostname not in _LOOPBACK:
        problems.append(f"{label} must be an https:// URL (plain http only on loopback)")


def check_model_limits(
    window: int, max_tokens: int, *, window_label: str, max_label: str, problems: list[str]
) -> None:
    """A response's token limit must fit in the model's context window."""
    if max_tokens > window:
        problems.append(f"{max_label} ({max_tokens}) exceeds {window_label} ({window})")
