"""JSON change operations: the delta format of documents and watch frames.

An op is a JSON list whose first item is its verb:

``["r", value]``
    replace the root.
``["s", path, value]``
    set a dict key, or a list index (``index == len`` appends).
``["d", path]``
    delete a dict key or a list item.
``["p", path, index, delete_count, items]``
    splice the list at ``path``.
``["a", path, text]``
    append ``text`` to the string at ``path``. Watches send it for text that grew (a
    streaming answer) instead of the whole string again; stored document deltas do not
    use it (:func:`diff` never makes it).

A path is a list of dict keys (str) and list indexes (int). Ops are plain JSON so they
can be stored as document deltas and sent to watchers unchanged.
"""

from __future__ import annotations

from math import isfinite
from typing import Any, cast

from core.errors import InvalidJson
from core.jsonvalue import JsonValue, json_copy, json_equal

__all__ = ["InvalidOp", "apply_ops", "diff", "revise"]


class InvalidOp(ValueError):
    """An op that is malformed or does not fit the value it is applied to."""


def apply_ops(value: JsonValue, ops: list[JsonValue]) -> JsonValue:
    """Apply ``ops`` in order and return the new root.

    ``value`` is changed in place: pass a private copy. Values inside ops are inserted
    as they are (callers detach them when needed).
    """
    for op in ops:
        value = _apply(value, op)
    return value


def _apply(root: JsonValue, op: JsonValue) -> JsonValue:
    if type(op) is not list or not op:
        raise InvalidOp(f"op {op!r} is not a non-empty list")
    verb = op[0]
    if verb == "r" and len(op) == 2:
        return op[1]
    if verb not in ("s", "d", "p", "a"):
        raise InvalidOp(f"unknown op verb {verb!r}")
    path = op[1] if len(op) > 1 else None
    if type(path) is not list:
        raise InvalidOp(f"op {op!r} has no path list")
    if verb == "p":
        if len(op) != 5:
            raise InvalidOp(f"splice op {op!r} needs path, index, delete count, items")
        target = _walk(root, path)
        index, count, items = op[2], op[3], op[4]
        if (
            type(target) is not list
            or type(index) is not int
            or type(count) is not int
            or type(items) is not list
            or not 0 <= index <= len(target)
            or count < 0
            or index + count > len(target)
        ):
            raise InvalidOp(f"splice op {op!r} does not fit its target")
        target[index : index + count] = items
        return root
    if not path:
        if verb == "s" and len(op) == 3:
            return op[2]
        raise InvalidOp(f"op {op!r} needs a non-empty path")
    parent = _walk(root, path[:-1])
    last = path[-1]
    if verb == "a":
        _append(parent, last, op)
        return root
    if verb == "s":
        if len(op) != 3:
            raise InvalidOp(f"set op {op!r} needs a path and a value")
        if type(parent) is dict and type(last) is str:
            parent[last] = op[2]
        elif type(parent) is list and type(last) is int and 0 <= last <= len(parent):
            if last == len(parent):
                parent.append(op[2])
            else:
                parent[last] = op[2]
        else:
            raise InvalidOp(f"set op {op!r} does not fit its target")
        return root
    if len(op) != 2:
        raise InvalidOp(f"delete op {op!r} takes only a path")
    if isinstance(parent, dict) and isinstance(last, str) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and type(last) is int and 0 <= last < len(parent):
        del parent[last]
    else:
        raise InvalidOp(f"delete op {op!r} does not fit its target")
    return root


def _append(parent: JsonValue, last: JsonValue, op: list[JsonValue]) -> None:
    text = op[2] if len(op) == 3 else None
    if type(text) is not str:
        raise InvalidOp(f"append op {op!r} needs a path and a string")
    if type(parent) is dict and type(last) is str and type(parent.get(last)) is str:
        parent[last] = cast(str, parent[last]) + text
    elif (
        type(parent) is list
        and type(last) is int
        and 0 <= last < len(parent)
        and type(parent[last]) is str
    ):
        parent[last] = cast(str, parent[last]) + text
    else:
        raise InvalidOp(f"append op {op!r} does not point at a string")


def _walk(root: JsonValue, path: list[JsonValue]) -> JsonValue:
    node = root
    for step in path:
        if isinstance(node, dict) and isinstance(step, str) and step in node:
            node = node[step]
        elif isinstance(node, list) and type(step) is int and 0 <= step < len(node):
            node = node[step]
        else:
            raise InvalidOp(f"path {path!r} does not exist")
    return node


def diff(old: JsonValue, new: JsonValue) -> list[JsonValue]:
    """Ops that turn ``old`` into ``new``; ``[]`` when they are equal.

    Lists are compared by common prefix and suffix, so appends and single-item edits
    stay small. Values in the ops are shared with ``new``.
    """
    ops: list[JsonValue] = []
    _diff(old, new, [], ops)
    return ops


def _diff(old: JsonValue, new: JsonValue, path: list[JsonValue], ops: list[JsonValue]) -> None:
    t = type(old)
    if t is not type(new):
        ops.append(["s", list(path), new] if path else ["r", new])
        return
    if t is dict:
        o = cast(dict[str, JsonValue], old)
        n = cast(dict[str, JsonValue], new)
        for k in o:
            if k not in n:
                ops.append(["d", [*path, k]])
        for k, v in n.items():
            if k in o:
                _diff(o[k], v, [*path, k], ops)
            else:
                ops.append(["s", [*path, k], v])
        return
    if t is list:
        a = cast(list[JsonValue], old)
        b = cast(list[JsonValue], new)
        start, end_a, end_b = _unequal_middle(a, b)
        if end_a == start and end_b == start:
            return
        if end_a - start == end_b - start:
            for i in range(start, end_a):
                _diff(a[i], b[i], [*path, i], ops)
            return
        ops.append(["p", list(path), start, end_a - start, b[start:end_b]])
        return
    if not json_equal(old, new):
        ops.append(["s", list(path), new] if path else ["r", new])


_MISSING: Any = object()


def revise(old: JsonValue, new: object, where: str) -> tuple[JsonValue, list[JsonValue]]:
    """``(value, ops)``: ``value`` is ``new`` admitted as JSON (like :func:`json_copy`
    with ``where``: detached and checked, :class:`~core.errors.InvalidJson` if it is not
    JSON) and ``ops`` is ``diff(old, value)``, found in the same walk.

    ``old`` must be an admitted value that nobody mutates (a document's committed value):
    the parts of ``new`` equal to their place in ``old`` are not copied or checked again,
    ``value`` shares ``old``'s parts there (and is ``old`` itself when nothing changed),
    so a change costs a walk of the two values plus a copy of what changed. An unchanged
    part that only reordered a dict's keys keeps ``old``'s order, as a delta would.

    A second diff, kept equal to :func:`diff` by a property test
    (``tests/core/test_jsonvalue_and_ops.py``), for one measured reason: a document
    write through ``json_copy`` + ``diff`` instead costs ~3% of a safe tool round's
    instructions (4.85 -> 4.99 M, callgrind), more than the round's +10% budget left
    once the records became plain dataclasses (issue 32).
    """
    ops: list[JsonValue] = []
    try:
        value = _revise(old, new, [], ops, 1)
    except InvalidJson:
        # Parts are checked apart, so their errors lack the path to them: the whole-value
        # check names the bad part from the root (and refuses whatever the parts refused).
        json_copy(new, where)
        raise
    return value, ops


def _scalar(value: Any) -> JsonValue:
    """``value`` admitted as a scalar (or as whatever :func:`json_copy` makes of it)."""
    t = type(value)
    if (
        (t is int and -_SMALL_INT < value < _SMALL_INT)
        or value is None
        or t is bool
        or (t is str and len(value) <= _SHORT_TEXT and value.isascii())
        or (t is float and isfinite(value))
    ):
        return value  # type: ignore[no-any-return]
    return json_copy(value)  # the rare rest (and every refusal) goes through the gate


# What ``_scalar`` admits without the gate: well inside its limits.
_SMALL_INT = 2**63
_SHORT_TEXT = 4096


def _revise(
    old: JsonValue, new: object, path: list[JsonValue], ops: list[JsonValue], depth: int
) -> JsonValue:
    """``new`` admitted at ``depth``, with the ops from ``old`` appended to ``ops``."""
    t = type(old)
    if t is not type(new):
        value = json_copy(new, depth=depth)
        ops.append(["s", list(path), value] if path else ["r", value])
        return value
    mark = len(ops)
    if t is dict:
        o = cast(dict[str, JsonValue], old)
        n = cast(dict[Any, Any], new)
        for k in o:
            if k not in n:
                ops.append(["d", [*path, k]])
        out: dict[str, JsonValue] = {}
        for k, v in n.items():
            if type(k) is not str:
                raise InvalidJson(f"has a key of type {type(k).__name__}")
            was = o.get(k, _MISSING)
            if was is not v:  # else the same object: an immutable scalar of ``old``
                tv = type(v)
                if was is _MISSING:
                    json_copy(k)  # a new key: checked as a string
                    v = json_copy(v, depth=depth + 1)
                    ops.append(["s", [*path, k], v])
                elif tv is dict or tv is list:
                    v = _revise(was, v, [*path, k], ops, depth + 1)
                elif tv is type(was) and v == was:  # equal scalars (NaN never is)
                    v = was
                else:
                    v = _scalar(v)
                    ops.append(["s", [*path, k], v])
            out[k] = v
        return old if len(ops) == mark else out
    if t is list:
        a = cast(list[JsonValue], old)
        b = cast(list[Any], new)
        if len(a) == len(b):
            # Item by item, as diff does once it has trimmed the equal ends.
            items = a.copy()
            for i, x in enumerate(a):
                y = b[i]
                if x is y:
                    continue
                ty = type(y)
                if ty is dict or ty is list:
                    items[i] = _revise(x, y, [*path, i], ops, depth + 1)
                elif ty is not type(x) or x != y:
                    items[i] = y = _scalar(y)
                    ops.append(["s", [*path, i], y])
            return old if len(ops) == mark else items
        start, end_a, end_b = _unequal_middle(a, b)
        # The equal ends are ``old``'s own parts: json_equal tells types apart exactly.
        middle = cast(list[JsonValue], json_copy(b[start:end_b], depth=depth))
        ops.append(["p", list(path), start, end_a - start, middle])
        return [*a[:start], *middle, *a[end_a:]]
    if old == new:  # equal scalars of one type (NaN never is)
        return old
    value = _scalar(new)
    ops.append(["s", list(path), value] if path else ["r", value])
    return value


def _unequal_middle(a: list[JsonValue], b: list[Any]) -> tuple[int, int, int]:
    """``(start, end_a, end_b)``: ``a[start:end_a]`` became ``b[start:end_b]``, the
    items before and after being equal in both."""
    start = 0
    limit = min(len(a), len(b))
    while start < limit and _equal(a[start], b[start]):
        start += 1
    end_a, end_b = len(a), len(b)
    while end_a > start and end_b > start and _equal(a[end_a - 1], b[end_b - 1]):
        end_a -= 1
        end_b -= 1
    return start, end_a, end_b


def _equal(a: JsonValue, b: Any) -> bool:
    """json_equal, with scalars and identical parts told without its walk."""
    if a is b:
        return True
    t = type(a)
    if t is not type(b):
        return False
    if t is dict or t is list:
        return json_equal(a, b)
    return a == b
