"""Agent documents: the fields a conversation's agent has, and how a change applies.

Pure validation against the installed extensions, shared by the harness (creating,
configuring and forking conversations) and the sub-agent tools.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import InvalidInput, UnknownTool
from core.harness.registry import Registry
from core.jsonvalue import JsonObject, JsonValue, json_copy

__all__ = ["AGENT_KEYS", "THINKING_LEVELS", "agent_change"]

AGENT_KEYS = ("model", "thinking", "tools", "extensions", "instructions", "cwd")
THINKING_LEVELS = ("off", "low", "medium", "high")


def agent_change(registry: Registry, current: JsonValue, change: Mapping[str, Any]) -> JsonObject:
    """``current`` (an agent document) with ``change`` applied: a field set to ``None``
    is cleared; unknown fields, thinking levels and non-string values are refused with
    :class:`InvalidInput`, tool names no installed extension provides with
    :class:`UnknownTool`, extension names not installed with :class:`InvalidInput` —
    all before anything is written (pure: hosts call it before opening an actor)."""
    unknown = sorted(set(change) - set(AGENT_KEYS))
    if unknown:
        raise InvalidInput(f"unknown agent field(s): {unknown}", field="agent")
    value: JsonObject = dict(current) if isinstance(current, dict) else {}
    for key, raw in change.items():
        if raw is None:
            value.pop(key, None)
            continue
        item = json_copy(raw, key)
        if key == "thinking" and item not in THINKING_LEVELS:
            raise InvalidInput(
                f"thinking must be one of {THINKING_LEVELS}, got {item!r}", field=key
            )
        if key in ("model", "instructions", "cwd") and not isinstance(item, str):
            raise InvalidInput(f"agent {key} must be a string", field=key)
        if key in ("tools", "extensions"):
            if not isinstance(item, list) or not all(isinstance(n, str) for n in item):
                raise InvalidInput(f"agent {key} must be a list of names", field=key)
            if key == "tools":
                missing = sorted({str(n) for n in item} - registry.tool_names())
                if missing:
                    raise UnknownTool(f"no installed extension provides tool(s) {missing}")
            else:
                installed = {e.name for e in registry.extensions}
                absent = sorted({str(n) for n in item} - installed)
                if absent:
                    raise InvalidInput(f"no installed extension is named {absent}", field=key)
        value[key] = item
    return value
