"""Harness settings: read live at every decision, never stored."""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from core.readonly import readonly

__all__ = ["CompactionSettings", "HarnessSettings", "ProgressSettings", "RetrySettings"]


@readonly(slots=False)
class RetrySettings:
    """Retries of retryable model errors: ``max_retries`` after the first attempt, waiting
    ``base_delay_ms * 2**(attempt - 1)`` capped at ``max_delay_ms`` (or the provider's
    Retry-After hint, capped the same way)."""

    enabled: bool = True
    max_retries: int = 3
    base_delay_ms: int = 2_000
    max_delay_ms: int = 60_000

    def delay_ms(self, attempt: int, hint_ms: int | None = None) -> int:
        if hint_ms is not None:
            return min(max(0, hint_ms), self.max_delay_ms)
        return int(min(self.base_delay_ms * 2 ** max(0, attempt - 1), self.max_delay_ms))


@readonly(slots=False)
class ProgressSettings:
    """How often streaming output is committed (model partials, tool output), and how
    often waiting watchers are woken while frames keep coming (see
    :mod:`core.harness.watch`).

    A response's first partial commits once it has streamed for ``partial_after_ms``
    or grown to ``partial_after_bytes`` characters, whichever comes first; later ones
    at most every ``partial_interval_ms``. A response that completes sooner commits no
    partial: its outcome commit records all of it. Either way a crash loses at most the
    current window of a stream.

    ``partial_commits_per_s`` is the budget of partial commits all of a harness's
    streaming responses share (see :mod:`core.harness.live`): up to about ten responses
    streaming at once commit at ``partial_interval_ms``; with more, each one's windows
    lengthen in proportion. ``0``: no shared budget."""

    partial_interval_ms: int = 100
    partial_after_ms: int = 100
    partial_after_bytes: int = 4096
    partial_commits_per_s: int = 100
    output_interval_ms: int = 100
    watch_wake_ms: int = 20


@readonly(slots=False)
class CompactionSettings:
    """See :mod:`core.harness.compaction` for what each threshold does."""

    enabled: bool = True
    reserve_tokens: int = 16_384
    keep_recent_tokens: int = 20_000
    background_tokens: int = 32_768


@readonly(slots=False)
class HarnessSettings:
    retry: RetrySettings = field(default_factory=RetrySettings)
    compaction: CompactionSettings = field(default_factory=CompactionSettings)
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    tool_execution: Literal["parallel", "sequential"] = "parallel"
    steering_mode: Literal["one-at-a-time", "all"] = "one-at-a-time"
    follow_up_mode: Literal["one-at-a-time", "all"] = "one-at-a-time"
    max_output_bytes: int = 50 * 1024
    max_output_lines: int = 2_000
