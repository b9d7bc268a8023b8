"""The JSON gate: what cannot be stored *and served back* is refused, with its field,
before anything is written; the walk is iterative (no input raises RecursionError)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.errors import InvalidInput, InvalidJson
from core.jsonvalue import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    MAX_STRING_CHARS,
    dumps,
    json_check,
    json_copy,
    json_equal,
    loads_unique,
    scrub_json,
    scrub_text,
)
from core.session import Tx
from core.storage import MemoryState
from tests.core.session.test_documents import NOTES
from tests.core.session.test_documents import open_session as open_doc_session
from tests.core.session.test_session import NOOP, open_session


def nested(depth: int, leaf: Any = 0) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


BAD: list[tuple[str, Any, str]] = [
    ("surrogate", {"a": [1, {"x": "x\ud800"}]}, "v.a[1].x"),
    ("low-surrogate", ["ok", "\udc00"], "v[1]"),
    ("surrogate-key", {"k": {"\udfff": 1}}, "v.k"),
    ("odd-key-path", {"a b": [float("nan")]}, 'v["a b"][0]'),
    ("too-deep", nested(MAX_DEPTH + 1), "v" + "[0]" * MAX_DEPTH),
    ("255-deep", nested(255), "v" + "[0]" * MAX_DEPTH),
    ("far-too-deep", nested(100_000), "v" + "[0]" * MAX_DEPTH),
    ("deep-dicts", {"d": nested(1000, {})}, "v.d" + "[0]" * (MAX_DEPTH - 1)),
    ("long-string", {"s": "x" * (MAX_STRING_CHARS + 1)}, "v.s"),
    ("long-key", {"x" * (MAX_STRING_CHARS + 1): 1}, "v"),
    ("infinity", [1, float("inf")], "v[1]"),
    ("huge-int", {"n": 10**MAX_INT_DIGITS}, "v.n"),
]


@pytest.mark.parametrize(("bad", "field"), [(b, f) for _, b, f in BAD], ids=[i for i, _, _ in BAD])
def test_the_gate_refuses_with_the_path_of_the_bad_value(bad: Any, field: str) -> None:
    with pytest.raises(InvalidJson) as caught:
        json_copy(bad, "v")
    assert caught.value.field == field
    assert isinstance(caught.value, InvalidInput) and isinstance(caught.value, ValueError)
    dumps(str(caught.value))  # the message itself can be served


@pytest.mark.parametrize(("bad", "field"), [(b, f) for _, b, f in BAD], ids=[i for i, _, _ in BAD])
def test_the_check_without_copy_refuses_what_the_gate_refuses(bad: Any, field: str) -> None:
    with pytest.raises(InvalidJson) as caught:
        json_check(bad, "v")
    assert caught.value.field == field


def test_the_check_without_copy_hands_back_the_value_itself() -> None:
    value = {"deep": nested(MAX_DEPTH - 1), "s": "é" * MAX_STRING_CHARS, "n": 2**64, "f": 1.5}
    assert json_check(value) is value
    assert json_check("text") == "text" and json_check(None) is None
    for bad in (object(), (1, 2), {1: "int key"}, [float("nan")], {"k": b"bytes"}):
        with pytest.raises(InvalidJson):
            json_check(bad)


def test_the_limits_themselves_are_admitted() -> None:
    value = {
        "deep": nested(MAX_DEPTH - 1),
        "s": "é" * MAX_STRING_CHARS,
        "n": -(10**MAX_INT_DIGITS) + 1,
        "m": 2**64,
    }
    copied = json_copy(value)
    assert json_equal(copied, value) and copied is not value
    assert json_copy("\U0001f600 astral is fine") == "\U0001f600 astral is fine"


def test_deep_values_compare_without_recursion() -> None:
    assert json_equal(nested(100_000), nested(100_000))
    assert not json_equal(nested(100_000), nested(100_000, 1))


def test_scrub_text_replaces_only_lone_surrogates() -> None:
    assert scrub_text("a\ud800b\U0001f600") == "a\ufffdb\U0001f600"
    assert scrub_text("plain") == "plain"
    value = {"a\udce9": ["x\ud800", 1, {"k": None}], "deep": nested(50, "\udfff")}
    scrubbed = scrub_json(value)
    json.dumps(scrubbed, ensure_ascii=False).encode()  # no lone surrogate is left
    assert scrub_json(nested(100_000, "\ud800")) is not None  # iterative: no RecursionError
    assert scrubbed["a\ufffd"] == ["x\ufffd", 1, {"k": None}]  # type: ignore[index,call-overload]


@pytest.mark.parametrize(("bad", "field"), [(b, f) for _, b, f in BAD], ids=[i for i, _, _ in BAD])
async def test_session_boundaries_write_nothing(bad: Any, field: str) -> None:
    session, storage = await open_session()
    await session.commit(lambda tx: tx.ensure_root())
    seq, commits = session.last_seq, storage.commits

    async def task(tx: Tx) -> None:
        await tx.create_task(NOOP, bad)

    async def entry(tx: Tx) -> None:
        await tx.append_entry(1, "custom", data=bad)

    async def kind(tx: Tx) -> None:
        await tx.append_entry(1, "custom\ud800")

    for write in (task, entry, kind):
        with pytest.raises(InvalidJson):
            await session.commit(write)
    assert session.last_seq == seq and storage.commits == commits


@pytest.mark.parametrize(("bad", "field"), [(b, f) for _, b, f in BAD], ids=[i for i, _, _ in BAD])
async def test_document_values_are_gated_and_nothing_is_written(bad: Any, field: str) -> None:
    session = await open_doc_session(MemoryState())
    seq = session.last_seq

    async def write(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value = {"items": [bad]}

    with pytest.raises(InvalidJson) as caught:
        await session.commit(write)
    assert caught.value.field is not None and caught.value.field.startswith("document")
    assert session.last_seq == seq


@pytest.mark.parametrize(("bad", "field"), [(b, f) for _, b, f in BAD], ids=[i for i, _, _ in BAD])
async def test_changes_to_a_stored_document_are_gated_with_their_path(bad: Any, field: str) -> None:
    # A change to a stored document goes through the whole-value gate: a bad part is
    # refused with its path, and nothing is written: not the storage, not the session's
    # cached value.
    session = await open_doc_session(MemoryState())

    async def start(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value = {"items": ["kept", {"deep": nested(40)}], "title": "t"}

    await session.commit(start)
    seq = session.last_seq
    committed = await session.document_value(NOTES, 1)

    async def write(tx: Tx) -> None:
        doc = await tx.doc(NOTES, 1)
        doc.value["items"].append(bad)  # type: ignore[call-overload,index,union-attr]

    expected = "document 'test.notes'"
    with pytest.raises(InvalidJson) as whole:
        json_copy({**committed, "items": [*committed["items"], bad]}, expected)  # type: ignore[arg-type,dict-item,index]
    with pytest.raises(InvalidJson) as caught:
        await session.commit(write)
    assert caught.value.field == whole.value.field
    assert caught.value.field is not None and caught.value.field.startswith(f"{expected}.items")
    assert session.last_seq == seq
    assert await session.document_value(NOTES, 1) == committed


async def test_a_change_may_not_nest_a_stored_document_too_deep() -> None:
    # The depth of a changed part counts from the document's root, not from the part.
    session = await open_doc_session(MemoryState())

    async def start(tx: Tx) -> None:
        # The innermost dict sits at the deepest level admitted: 1 + 1 + 61 + 1.
        (await tx.doc(NOTES, 1)).value = {"items": [nested(MAX_DEPTH - 3, {})]}

    await session.commit(start)

    def grow(levels: int) -> Any:
        async def write(tx: Tx) -> None:
            doc = await tx.doc(NOTES, 1)
            leaf = doc.value["items"][0]  # type: ignore[call-overload,index]
            for _ in range(MAX_DEPTH - 3):
                leaf = leaf[0]
            leaf["x"] = nested(levels)

        return write

    seq = session.last_seq
    with pytest.raises(InvalidJson, match=f"nests deeper than {MAX_DEPTH}") as caught:
        await session.commit(grow(1))
    assert caught.value.field == "document 'test.notes'.items" + "[0]" * (MAX_DEPTH - 2) + ".x"
    assert session.last_seq == seq
    await session.commit(grow(0))  # a scalar at the limit's depth is admitted
    assert session.last_seq == seq + 1  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('{"type": "write", "type": "input"}', "type"),
        ('{"a": [{"b": 1, "c": 2, "b": 3}]}', "b"),
        ('[{"x": {"y": null, "y": null}}]', "y"),
    ],
)
def test_loads_unique_refuses_a_key_named_twice_and_names_it(text: str, key: str) -> None:
    with pytest.raises(InvalidJson, match=f'the key "{key}" appears twice') as raised:
        loads_unique(text.encode())
    assert raised.value.field == key


def test_loads_unique_reads_what_json_loads_reads() -> None:
    text = '{"a": {"b": [1, 2.5, "c", null, true]}, "d": {}, "e": [{"a": 1}, {"a": 2}]}'
    assert loads_unique(text) == json.loads(text)
    with pytest.raises(json.JSONDecodeError) as raised:
        loads_unique("{not json")
    assert not isinstance(raised.value, InvalidJson)
