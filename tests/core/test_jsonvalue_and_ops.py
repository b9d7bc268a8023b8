"""JSON values and the JSON op format: the gate, equality, diff and apply."""

from __future__ import annotations

import copy
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.docops import InvalidOp, apply_ops, diff
from core.errors import InvalidJson
from core.jsonvalue import (
    JsonValue,
    copy_admitted,
    dumps,
    dumps_spaced,
    json_copy,
    json_equal,
    loads,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=5), children, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_applying_the_diff_turns_the_old_value_into_the_new_one(a: JsonValue, b: JsonValue) -> None:
    ops = diff(a, b)
    result = apply_ops(copy.deepcopy(a), copy.deepcopy(ops))
    assert json_equal(result, b)
    # Ops are plain JSON, so they can be stored and replayed later.
    assert json_equal(apply_ops(copy.deepcopy(a), loads(dumps(ops))), b)
    assert (ops == []) == json_equal(a, b)


_REFERENCE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(json_values | st.text())
def test_dumps_writes_what_the_reference_encoder_writes(value: JsonValue) -> None:
    # dumps drives the C encoder directly; its text must not drift from the stdlib's.
    assert dumps(value) == _REFERENCE.encode(value)


@settings(max_examples=300, deadline=None)
@given(json_values | st.text() | st.floats())
def test_dumps_spaced_writes_what_json_dumps_writes(value: JsonValue) -> None:
    # Token estimates count tool arguments by this text: it must be json.dumps's.
    assert dumps_spaced(value) == json.dumps(value)
    assert dumps_spaced([value, {"k": value}]) == json.dumps([value, {"k": value}])


@settings(max_examples=300, deadline=None)
@given(json_values, st.sampled_from(["", " ", "\n "]))
def test_loads_reads_what_json_loads_reads(value: JsonValue, space: str) -> None:
    for text in (dumps(value), json.dumps(value, indent=1), space + dumps(value) + space):
        assert json_equal(loads(text), json.loads(text))


@pytest.mark.parametrize(
    "bad", ["", " ", "{", "{}x", "{} []", "\ufeff{}", "[1,]", '{"a" 1}', "tru"]
)
def test_loads_refuses_what_json_loads_refuses_with_its_message(bad: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        loads(bad)
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(bad)
    assert str(ours.value) == str(reference.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, b"x", {"k": {1, 2}}, object()])
def test_dumps_refuses_what_the_reference_encoder_refuses(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        _REFERENCE.encode(bad)
    with pytest.raises((TypeError, ValueError)):
        dumps(bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_json_copy_detaches_and_round_trips(value: JsonValue) -> None:
    copied = json_copy(value)
    assert json_equal(copied, value)
    assert json_equal(loads(dumps(copied)), value)
    if isinstance(value, dict | list) and value:
        assert copied is not value


def _containers(value: object) -> set[int]:
    """The ids of every dict and list in ``value``."""
    found: set[int] = set()
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            found.add(id(item))
            pending.extend(item.values())
        elif isinstance(item, list):
            found.add(id(item))
            pending.extend(item)
    return found


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_copy_admitted_copies_every_container(value: JsonValue) -> None:
    copied = copy_admitted(value)
    assert json_equal(copied, value) and dumps(copied) == dumps(value)
    assert not _containers(copied) & _containers(value)


def test_small_edits_produce_small_ops() -> None:
    old = {"items": list(range(100)), "title": "t"}
    new = {"items": [*range(100), 100], "title": "t"}
    assert diff(old, new) == [["p", ["items"], 100, 0, [100]]]
    assert diff([1, 2, 3], [1, 9, 3]) == [["s", [1], 9]]
    assert diff({"a": 1}, {}) == [["d", ["a"]]]
    assert diff(1, "x") == [["r", "x"]]


@pytest.mark.parametrize(
    "bad",
    [math.nan, [math.inf], {"k": (1,)}, {1: 2}, b"x", {"s": {1}}, True.__class__],
    ids=["nan", "inf", "tuple", "int-key", "bytes", "set", "type"],
)
def test_json_copy_refuses_what_json_cannot_hold(bad: object) -> None:
    with pytest.raises(InvalidJson):
        json_copy(bad)


def test_json_equal_tells_bool_from_int_and_ignores_key_order() -> None:
    assert json_equal({"a": 1, "b": [True]}, {"b": [True], "a": 1})
    assert not json_equal(1, True)
    assert not json_equal(1, 1.0)
    assert not json_equal([1], [1, 2])


@pytest.mark.parametrize(
    ("value", "op"),
    [
        ({}, ["x", []]),
        ({}, "not a list"),
        ({}, ["s"]),
        ({}, ["s", ["a", "b"], 1]),
        ([1], ["p", [], 5, 0, []]),
        ([1], ["d", [3]]),
        ({"a": 1}, ["d", ["b"]]),
        ({}, ["d", []]),
    ],
)
def test_malformed_or_misfitting_ops_are_refused(value: JsonValue, op: JsonValue) -> None:
    with pytest.raises(InvalidOp):
        apply_ops(value, [op])
