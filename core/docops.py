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

from typing import Any, cast

from core.jsonvalue import JsonValue, json_equal

__all__ = ["InvalidOp", "apply_ops", "diff"]


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
            if k not in o:
                ops.append(["s", [*path, k], v])
                continue
            w = o[k]
            tv = type(v)
            if tv is type(w) and tv is not dict and tv is not list:
                # Same-typed scalars, told here without a call per leaf: most of a
                # document's leaves are unchanged, and == is json_equal for them.
                if w != v:
                    ops.append(["s", [*path, k], v])
            else:
                _diff(w, v, [*path, k], ops)
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
