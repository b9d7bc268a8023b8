"""JSON values: the only data that crosses into storage.

Everything perdure persists (task inputs, checkpoints, results, memos, entry data,
document values) must be plain JSON: ``dict`` with ``str`` keys, ``list``, ``str``,
``int``, finite ``float``, ``bool`` and ``None``. :func:`json_copy` is the gate: it
validates and detaches in one pass, so a value admitted into a commit can no longer
be changed by the caller that handed it over, and a value that could not be stored
*and served back* is refused before any write:

* anything that does not round-trip through JSON (NaN, Infinity, a tuple, ``bytes``,
  an ``int`` dict key, a ``str`` subclass);
* a string or dict key holding a code point that is not a Unicode scalar value (a lone
  surrogate, U+D800-U+DFFF): storage could escape it, but no UTF-8 reply can carry it;
* nesting deeper than :data:`MAX_DEPTH` containers (serializers and parsers elsewhere,
  pydantic's included, give up long before Python's recursion limit would);
* a string or key longer than :data:`MAX_STRING_CHARS`;
* an integer of more than :data:`MAX_INT_DIGITS` digits (Python refuses to print, and
  so to serve back, longer ones). Within that, integers are exact as JSON allows: no
  64-bit bound, because a JSON Schema cannot tell ``2**64`` from the float ``1.8e19``,
  so an API could not state such a bound; JSON is stored as text, never bound as an
  SQL integer.

The walk is iterative, so no input can raise ``RecursionError``. A refusal raises
:class:`~core.errors.InvalidJson` whose ``field`` is the path of the bad value, rooted
at the caller's name for the whole value (``data.items[3].x``).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, TypeAlias

from core.errors import InvalidJson

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "MAX_STRING_CHARS",
    "JsonObject",
    "JsonValue",
    "check_text",
    "copy_admitted",
    "dumps",
    "dumps_spaced",
    "json_check",
    "json_copy",
    "json_equal",
    "loads",
    "loads_unique",
    "scrub_json",
    "scrub_text",
]

JsonValue: TypeAlias = "dict[str, JsonValue] | list[JsonValue] | str | int | float | bool | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"

#: Containers nested deeper than this are refused (a top-level list is depth 1).
MAX_DEPTH: Final = 64
#: Longest string (or dict key) admitted, in code points: 1 MiB. Tool outputs are capped
#: far lower (50 KiB by default), so only a hostile or broken caller gets near it.
MAX_STRING_CHARS: Final = 1024 * 1024

#: Longest integer admitted, in decimal digits: CPython's default limit for ``str(int)``.
MAX_INT_DIGITS: Final = 4300

_INT_MIN: Final = -(10**MAX_INT_DIGITS) + 1
_INT_MAX: Final = 10**MAX_INT_DIGITS - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Built once (``json.dumps`` builds an encoder per call unless every option is a default):
# storage encodes every record it writes. No circular check: values admitted by
# ``json_copy`` are trees, and a cycle still fails (RecursionError instead of ValueError).
_compact = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=True, allow_nan=False, check_circular=False
)
# ``json.dumps``'s own defaults (", " and ": ", NaN allowed), so the text is the same.
_spaced = json.JSONEncoder(check_circular=False)
_decoder = json.JSONDecoder()


def dumps(value: JsonValue) -> str:
    """Encode compactly as ASCII (values admitted by :func:`json_copy` always encode).

    Raises ``TypeError`` or ``ValueError`` for a value that is not JSON, and
    ``RecursionError`` for one that contains itself.
    """
    return _compact.encode(value)


def dumps_spaced(value: JsonValue) -> str:
    """``json.dumps(value)``'s very text, for a value that is a tree (no cycle): what
    token estimates count tool arguments by, several times per model request."""
    return _spaced.encode(value)


def loads(text: str) -> Any:
    """``json.loads(text)``. Storage's own text (no surrounding whitespace) is decoded by
    ``raw_decode``, which skips ``json.loads``'s two whitespace scans; anything else (and
    every error) takes ``json.loads``'s path, which checks for extra data and names the
    problem."""
    if type(text) is str:
        try:
            value, end = _decoder.raw_decode(text)
        except ValueError:
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def loads_unique(text: str | bytes) -> Any:
    """``json.loads(text)`` for text from outside (a request body), refusing an object
    that names a key twice: JSON leaves duplicates to the reader (RFC 8259 §4) and
    ``json.loads`` keeps the last, so ``{"type": "write", "type": "input"}`` would be
    taken as an input. Raises :class:`~core.errors.InvalidJson` naming the key (its
    ``field``), or ``ValueError`` for text that is not JSON (check ``InvalidJson``
    first: it is a ``ValueError`` too)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: find which key, only then
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise InvalidJson(
                    f"the key {json.dumps(key)} appears twice in one JSON object", field=key
                )
            seen.add(key)
    return obj


def _text_problem(text: str, max_chars: int) -> str | None:
    if len(text) > max_chars:
        return f"is longer than {max_chars} characters"
    if not text.isascii() and _SURROGATE.search(text) is not None:
        return "holds a lone surrogate (U+D800-U+DFFF), which UTF-8 cannot carry"
    return None


def check_text(text: str, field: str, *, max_chars: int = MAX_STRING_CHARS) -> str:
    """Return ``text`` if it can be stored and served back; raise :class:`InvalidJson`.

    For strings that reach storage outside a JSON value (entry kinds, request ids).
    """
    if type(text) is not str:
        raise InvalidJson(f"{field} must be a string", field=field)
    problem = _text_problem(text, max_chars)
    if problem is not None:
        raise InvalidJson(f"{field} {problem}", field=field)
    return text


def scrub_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, for text perdure produces
    itself from outside sources (tool output, file names decoded with ``surrogateescape``)
    where refusing would lose the whole result."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def scrub_json(value: JsonValue) -> JsonValue:
    """``value`` with :func:`scrub_text` applied to every string and key (a copy; iterative).

    For results perdure builds from the outside world (a directory listing holding a file
    name that is not UTF-8), which must still be served.
    """
    root: list[JsonValue] = [None]
    stack: list[tuple[JsonValue, Any, Any]] = [(value, root, 0)]
    while stack:
        item, target, slot = stack.pop()
        if type(item) is str:
            target[slot] = scrub_text(item)
        elif type(item) is dict:
            copy: Any = {}
            target[slot] = copy
            for k, v in item.items():
                key = scrub_text(k)
                copy[key] = None
                stack.append((v, copy, key))
        elif type(item) is list:
            copy = [None] * len(item)
            target[slot] = copy
            stack.extend((v, copy, i) for i, v in enumerate(item))
        else:
            target[slot] = item
    return root[0]


# A path is kept as a linked list ``(parent, key)`` and only spelled out on refusal.
_Path: TypeAlias = "tuple[_Path, str | int] | None"


def _spell(where: str, path: _Path) -> str:
    parts: list[str] = []
    while path is not None:
        path, key = path
        if type(key) is int:
            parts.append(f"[{key}]")
        elif _IDENTIFIER.fullmatch(key):  # type: ignore[arg-type]
            parts.append(f".{key}")
        else:
            # Keys are quoted as JSON, escaped to ASCII so the message itself is servable.
            parts.append(f"[{json.dumps(key)}]")
    return where + "".join(reversed(parts))


_CONTAINER: Final = "container"


def _scalar_problem(item: object, max_string_chars: int) -> str | None:
    """Why a scalar is refused, ``None`` if it is fine, :data:`_CONTAINER` for a dict/list."""
    # Exact type checks: subclasses (IntEnum, OrderedDict, str subclasses) are not
    # guaranteed to round-trip, and bool must not be confused with int elsewhere.
    t = type(item)
    if t is str:
        return _text_problem(item, max_string_chars)  # type: ignore[arg-type]
    if item is None or t is bool:
        return None
    if t is int:
        if _INT_MIN <= item <= _INT_MAX:  # type: ignore[operator]
            return None
        return f"is an integer of more than {MAX_INT_DIGITS} digits"
    if t is float:
        if math.isfinite(item):  # type: ignore[arg-type]
            return None
        return f"is {item!r}, which JSON cannot represent"
    if t is dict or t is list:
        return _CONTAINER
    return f"contains a {t.__name__}, which is not a JSON value"


def json_copy(
    value: object,
    where: str = "value",
    *,
    max_string_chars: int = MAX_STRING_CHARS,
    depth: int = 1,
) -> JsonValue:
    """Return a detached deep copy of ``value``; raise :class:`InvalidJson` if it is not
    JSON that can be stored and served back (see the module docstring).

    ``where`` names the whole value; the error's ``field`` extends it to the bad part.
    ``depth`` is the nesting level ``value`` sits at when it is a part of a larger value
    (1: it is the whole value), so the part's own nesting counts toward :data:`MAX_DEPTH`.
    """
    t = type(value)
    if t is not dict and t is not list:  # a scalar (or a refusal); containers go on
        problem = _scalar_problem(value, max_string_chars)
        if problem is None:
            return value  # type: ignore[return-value]
        _refuse(where, None, problem)
    root: list[JsonValue] = [None]
    # Containers still to copy: (source, where its copy goes, slot there, path, depth).
    # Scalars are checked and placed while their container is copied; the common types
    # are tested inline (this runs on every commit), the rest by ``_scalar_problem``.
    stack: list[tuple[Any, Any, Any, _Path, int]] = [(value, root, 0, None, depth)]
    isfinite = math.isfinite
    while stack:
        source, target, slot, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            _refuse(where, path, f"nests deeper than {MAX_DEPTH} levels")
        copy: Any
        if type(source) is dict:
            copy = {}
            for k in source:
                if type(k) is not str:
                    _refuse(where, path, f"has a key of type {type(k).__name__}")
                if len(k) > max_string_chars or (
                    not k.isascii() and _SURROGATE.search(k) is not None
                ):
                    _refuse(where, path, f"has a key that {_text_problem(k, max_string_chars)}")
            pairs: Any = source.items()
        else:
            copy = [None] * len(source)
            pairs = enumerate(source)
        target[slot] = copy
        for key, item in pairs:
            t = type(item)
            if t is str:
                if len(item) > max_string_chars or (
                    not item.isascii() and _SURROGATE.search(item) is not None
                ):
                    _refuse(where, (path, key), _text_problem(item, max_string_chars) or "")
                copy[key] = item
            elif t is dict or t is list:
                copy[key] = None  # placeholder: keeps the caller's key order
                stack.append((item, copy, key, (path, key), depth + 1))
            elif (
                item is None
                or t is bool
                or (t is int and _INT_MIN <= item <= _INT_MAX)
                or (t is float and isfinite(item))
            ):
                copy[key] = item
            else:
                _refuse(where, (path, key), _scalar_problem(item, max_string_chars) or "")
    return root[0]


def json_check(value: object, where: str = "value") -> JsonValue:
    """Return ``value`` itself if :func:`json_copy` would admit it; raise as it would.

    For a value its caller built for this one use and hands over (nobody else holds any
    part of it, so nothing can change it afterwards): the gate's check without its copy.
    Anything that may be shared goes through :func:`json_copy`.
    """
    t = type(value)
    if t is not dict and t is not list:  # a scalar (or a refusal); containers go on
        problem = _scalar_problem(value, MAX_STRING_CHARS)
        if problem is None:
            return value  # type: ignore[return-value]
        _refuse(where, None, problem)
    # Containers still to check: (container, path, depth); as in json_copy, the common
    # scalar types are tested inline, the rest (and every refusal) by ``_scalar_problem``.
    stack: list[tuple[Any, _Path, int]] = [(value, None, 1)]
    isfinite = math.isfinite
    limit = MAX_STRING_CHARS
    while stack:
        source, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            _refuse(where, path, f"nests deeper than {MAX_DEPTH} levels")
        pairs: Any
        if type(source) is dict:
            for k in source:
                if type(k) is not str:
                    _refuse(where, path, f"has a key of type {type(k).__name__}")
                if len(k) > limit or (not k.isascii() and _SURROGATE.search(k) is not None):
                    _refuse(where, path, f"has a key that {_text_problem(k, limit)}")
            pairs = source.items()
        else:
            pairs = enumerate(source)
        for key, item in pairs:
            t = type(item)
            if t is str:
                if len(item) > limit or (
                    not item.isascii() and _SURROGATE.search(item) is not None
                ):
                    _refuse(where, (path, key), _text_problem(item, limit) or "")
            elif t is dict or t is list:
                stack.append((item, (path, key), depth + 1))
            elif not (
                item is None
                or t is bool
                or (t is int and _INT_MIN <= item <= _INT_MAX)
                or (t is float and isfinite(item))
            ):
                _refuse(where, (path, key), _scalar_problem(item, limit) or "")
    return value  # type: ignore[return-value]


def copy_admitted(value: JsonValue) -> JsonValue:
    """A detached deep copy of a value that :func:`json_copy` already admitted (or that
    storage serves back, having stored only admitted values), without checking it again.

    For copies of the kernel's own committed values (a document handle's private value):
    the check would only repeat what admitted them, and it costs twice the copy. A value
    that was never admitted must go through :func:`json_copy` instead. Recursive: admitted
    values nest at most :data:`MAX_DEPTH` levels.
    """
    t = type(value)
    if t is dict:
        copy: Any = value.copy()  # type: ignore[union-attr]
        items: Any = copy.items()
    elif t is list:
        copy = value.copy()  # type: ignore[union-attr]
        items = enumerate(copy)
    else:
        return value  # immutable: shared
    # Scalars come along with the shallow copy; only containers are copied again.
    for key, item in items:
        t = type(item)
        if t is dict or t is list:
            copy[key] = copy_admitted(item)
    return copy  # type: ignore[no-any-return]


def _refuse(where: str, path: _Path, problem: str) -> None:
    field = _spell(where, path)
    raise InvalidJson(f"{field} {problem}", field=field)


def json_equal(a: JsonValue, b: JsonValue) -> bool:
    """Structural equality that, unlike ``==``, tells ``True`` from ``1`` and ``1`` from ``1.0``.

    Key order is ignored. Used to decide whether a phase made durable progress. Iterative,
    like :func:`json_copy`, so a deep value cannot raise ``RecursionError``.
    """
    pending: list[tuple[JsonValue, JsonValue]] = [(a, b)]
    while pending:
        x, y = pending.pop()
        tx = type(x)
        if tx is not type(y):
            return False
        if tx is dict:
            assert isinstance(x, dict) and isinstance(y, dict)
            if x.keys() != y.keys():
                return False
            pending.extend((v, y[k]) for k, v in x.items())
        elif tx is list:
            assert isinstance(x, list) and isinstance(y, list)
            if len(x) != len(y):
                return False
            pending.extend(zip(x, y, strict=True))
        elif x != y:
            return False
    return True
