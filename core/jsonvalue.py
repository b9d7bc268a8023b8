"""JSON values: the only data that crosses into storage.

Everything perdure persists (task inputs, checkpoints, results, memos, entry data,
document values) must be plain JSON: ``dict`` with ``str`` keys, ``list``, ``str``,
``int``, finite ``float``, ``bool`` and ``None``. :func:`json_copy` is the gate: it
validates and detaches in one pass, so a value admitted into a commit can no longer
be changed by the caller that handed it over, and a value that would not survive a
round-trip through JSON (NaN, a tuple, a ``bytes``, an ``int`` dict key) is refused
before any write.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeAlias

from core.errors import InvalidJson

__all__ = [
    "JsonObject",
    "JsonValue",
    "dumps",
    "json_copy",
    "json_equal",
    "loads",
]

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def dumps(value: JsonValue) -> str:
    """Encode compactly as ASCII.

    ``ensure_ascii`` keeps lone surrogates (``"\\ud800"``) lossless: they become
    escapes instead of failing UTF-8 encoding at the database driver.
    """
    return _encoder.encode(value)


def loads(text: str) -> Any:
    return json.loads(text)


def json_copy(value: object, where: str = "value") -> JsonValue:
    """Return a detached deep copy of ``value``; raise :class:`InvalidJson` if it is not JSON."""
    return _copy(value, where)


def _copy(value: object, where: str) -> JsonValue:
    # Exact type checks: subclasses (IntEnum, OrderedDict, str subclasses) are not
    # guaranteed to round-trip, and bool must not be confused with int elsewhere.
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value  # type: ignore[return-value]
    if t is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise InvalidJson(f"{where} is {value!r}, which JSON cannot represent")
        return value  # type: ignore[return-value]
    if t is dict:
        out: dict[str, JsonValue] = {}
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) is not str:
                raise InvalidJson(f"{where} has a non-string key {k!r}")
            out[k] = _copy(v, where)
        return out
    if t is list:
        return [_copy(v, where) for v in value]  # type: ignore[attr-defined]
    raise InvalidJson(f"{where} contains a {t.__name__}, which is not a JSON value")


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """Structural equality that, unlike ``==``, tells ``True`` from ``1`` and ``1`` from ``1.0``.

    Key order is ignored. Used to decide whether a phase made durable progress.
    """
    ta, tb = type(a), type(b)
    if ta is not tb:
        return False
    if ta is dict:
        assert isinstance(a, dict) and isinstance(b, dict)
        if a.keys() != b.keys():
            return False
        return all(json_equal(v, b[k]) for k, v in a.items())
    if ta is list:
        assert isinstance(a, list) and isinstance(b, list)
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b
