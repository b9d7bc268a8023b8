"""The ``perdure`` logger: one line per thing an operator wants to see.

Each line has a *kind* (``request``, ``model``, ``tool``, ``event``), a human sentence and
structured fields. ``configure_logging("text")`` prints ``TIME LEVEL KIND sentence``;
``configure_logging("json")`` prints one JSON object per line with ``time`` (ISO-8601,
UTC), ``level``, ``kind``, ``message`` and the fields, for log shippers.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import IO, Any, Literal

from core.harness.events import summarize_recovery
from core.jsonvalue import JsonObject
from core.times import iso_time

__all__ = ["LOGGER", "LogFormat", "configure_logging", "describe_event", "log_line"]

LOGGER = "perdure"
LogFormat = Literal["text", "json"]
_FIELDS = "perdure_fields"
_KIND = "perdure_kind"


def log_line(
    kind: str, message: str, fields: Mapping[str, object] | None = None, level: int = logging.INFO
) -> None:
    """Log one line of ``kind`` with its structured ``fields``."""
    extra = {_KIND: kind, _FIELDS: dict(fields or {})}
    logging.getLogger(LOGGER).log(level, message, extra=extra)


class _Text(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        kind = getattr(record, _KIND, record.name)
        when = iso_time(int(record.created * 1000))
        return f"{when} {record.levelname.lower():<7} {kind:<7} {record.getMessage()}"


class _Json(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": iso_time(int(record.created * 1000)),
            "level": record.levelname.lower(),
            "kind": getattr(record, _KIND, record.name),
            "message": record.getMessage(),
        }
        line.update(getattr(record, _FIELDS, {}))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure_logging(fmt: LogFormat = "text", stream: IO[str] | None = None) -> None:
    """Send the ``perdure`` logger's lines (INFO and up) to ``stream`` (stderr) in ``fmt``."""
    logger = logging.getLogger(LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Json() if fmt == "json" else _Text())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def describe_event(event: JsonObject) -> str:
    """A harness event (see :mod:`core.harness.events`) as a sentence for people."""
    kind = event.get("kind")
    if kind == "restart":
        tasks = [t for t in event.get("tasks") or [] if isinstance(t, dict)]  # type: ignore[union-attr]
        names = ", ".join(f"{t.get('tool') or t.get('kind')} (task {t.get('task')})" for t in tasks)
        return f"recovering after restart: {names}"
    if kind in ("tool_recovery", "request_resent"):
        line = f"recovered after restart: {summarize_recovery([event])}"
        if event.get("how") == "recovered":
            line += f" (op {event.get('op')}, {event.get('op_state')})"
        elif event.get("how") == "interrupted":
            line += f" ({event.get('reason')})"
        return line
    if kind == "retry":
        return (
            f"model error, retry {event.get('attempt')} in {int(event.get('delay_ms') or 0)} ms "  # type: ignore[arg-type]
            f"at {event.get('until_iso')}: {event.get('error')}"
        )
    if kind == "compaction":
        state = event.get("state")
        reason = f" ({event.get('reason')})" if event.get("reason") else ""
        return f"compaction {state}{reason} (task {event.get('task')})"
    if kind == "abort":
        return _describe_abort(event)
    if kind == "approval":
        return _describe_approval(event)
    return str(kind)


def _describe_approval(event: JsonObject) -> str:
    """An ``approval`` event: a call waiting for a decision, or how that wait settled."""
    tool, state = event.get("tool"), event.get("state")
    if state == "pending":
        expires = event.get("expires_at")
        until = f", denied at {iso_time(expires)} if undecided" if isinstance(expires, int) else ""
        return f"{tool} waits for approval (task {event.get('task')}{until})"
    note = f": {event.get('note')}" if event.get("note") else ""
    return f"{tool}: {state}{note}"


def _describe_abort(event: JsonObject) -> str:
    """An ``abort`` event by its path (``scope``): what was aborted, in a phrase."""
    scope, task = event.get("scope"), event.get("task")
    what = event.get("tool") or event.get("task_kind") or "task"
    if scope == "timer":
        return f"reminder {task} cancelled"
    if scope == "schedule":
        return f"schedule {task} cancelled"
    if scope == "submission" and event.get("withdrawn"):
        return f"submission {event.get('submission')} withdrawn before it started"
    if scope == "submission":
        return f"submission {event.get('submission')} aborted: its run ({what} task {task})"
    if scope == "task":
        return f"{what} task {task} aborted"
    background = ", background work too" if event.get("background") else ""
    return f"conversation aborted: {event.get('tasks')} task(s){background}"
