"""Validation errors in words a person understands.

pydantic reports where a request went wrong in its own terms: a tagged union's tag
appears in the location as if it were a field (``body.input.content``), a missing tag
reads "Unable to extract tag using discriminator", and a body that is not a JSON object
— most often one sent without ``Content-Type: application/json``, which FastAPI does not
parse — reads "Input should be a valid dictionary or object to extract fields from".
:func:`describe` turns each error into ``where: what`` with the location as the client
wrote it and the reason in plain words.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["describe", "is_json_media"]

_MAX_PROBLEMS = 5
_NOT_AN_OBJECT = {"model_attributes_type", "model_type", "dict_type"}
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def is_json_media(content_type: str | None) -> bool:
    """``application/json`` or ``…+json``, parameters ignored."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def describe(errors: Sequence[Mapping[str, Any]], body: Any, content_type: str | None) -> str:
    """One line for the client: up to five problems, ``where: what``."""
    problems: list[str] = []
    for error in errors:
        line = _problem(error, body, content_type)
        if line not in problems:
            problems.append(line)
    shown = problems[:_MAX_PROBLEMS]
    more = len(problems) - len(shown)
    return "invalid request: " + "; ".join(shown) + (f"; and {more} more" if more else "")


def _problem(error: Mapping[str, Any], body: Any, content_type: str | None) -> str:
    loc = tuple(error.get("loc", ()))
    kind = str(error.get("type", ""))
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    where = _where(loc, body)
    if loc == ("body",):
        if kind == "missing":
            return "body: a JSON body is required"
        if kind in _NOT_AN_OBJECT and not is_json_media(content_type):
            sent = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
            return (
                f"body: send it as JSON with the header Content-Type: application/json "
                f"(the request had {sent})"
            )
    if kind in _NOT_AN_OBJECT:
        return f"{where}: expected a JSON object, got {_json_type(error.get('input'))}"
    if kind == "missing":
        return f"{where}: required"
    if kind == "extra_forbidden":
        return f"{where}: not a field here"
    if kind == "union_tag_not_found":
        field = _unquoted(ctx.get("discriminator"))
        return f"{where}: the field '{field}' is required"
    if kind == "union_tag_invalid":
        field = _unquoted(ctx.get("discriminator"))
        return f"{where}.{field}: {ctx.get('tag')!r} is not one of {ctx.get('expected_tags')}"
    return f"{where}: {_reason(str(error.get('msg', 'invalid')))}"


def _where(loc: tuple[Any, ...], body: Any) -> str:
    """The location as the client wrote it: a part that names no key of the body and is
    not the last one is a union's tag that pydantic put in the path, and is left out."""
    if not loc:
        return "request"
    shown = [str(loc[0])]
    node = body if loc[0] == "body" else None
    for i, part in enumerate(loc[1:], start=1):
        last = i == len(loc) - 1
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif loc[0] == "body" and not last:
            continue  # a tag (or a validator's name), not a field the client sent
        else:
            node = None
        shown.append(str(part))
    return ".".join(shown)


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), "something else")


def _unquoted(value: Any) -> str:
    return str(value).strip("'\"")


def _reason(message: str) -> str:
    # pydantic's "Input should be a valid string": the subject is the field.
    if message.startswith("Input should"):
        message = "should" + message[len("Input should") :]
    return message
