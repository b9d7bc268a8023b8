"""direct_init: the cheaper __init__ of the frozen, slotted records builds the same records."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from core.records import Entry, Running, Task, Terminal, Waiting
from core.slotted import direct_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "b"
    c: list[int] = dataclasses.field(default_factory=list)
    d: str = dataclasses.field(default="d", init=False)


@direct_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Direct:
    a: int
    b: str = "b"
    c: list[int] = dataclasses.field(default_factory=list)
    d: str = dataclasses.field(default="d", init=False)


def test_the_same_values_defaults_and_factories_as_the_dataclass_init() -> None:
    calls: list[tuple[tuple[object, ...], dict[str, object]]] = [
        ((1,), {}),
        ((1, "x"), {}),
        ((1,), {"c": [2]}),
        ((), {"a": 3, "b": "y"}),
    ]
    for args, kwargs in calls:
        plain, direct = _Plain(*args, **kwargs), _Direct(*args, **kwargs)  # type: ignore[arg-type]
        assert dataclasses.astuple(plain) == dataclasses.astuple(direct)
    assert _Direct(1).c is not _Direct(1).c  # a fresh default per instance
    with pytest.raises(TypeError):
        _Direct()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Direct(1, d="no")  # type: ignore[call-arg]  # init=False stays out of the signature


def test_records_stay_frozen_equal_and_hashable() -> None:
    task = Task(1, 2, "k", 1, {"x": 1}, Running({"phase": "p"}))
    assert task == Task(1, 2, "k", 1, {"x": 1}, Running({"phase": "p"}))
    assert task.memos == {} and task.owner is None and task.status == "running"
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.id = 3  # type: ignore[misc]
    assert hash(Terminal(None)) == hash(Terminal(None))  # type: ignore[arg-type]
    assert Waiting({"phase": "w"}).policy == "all_settled"
    assert Entry(5, 1, "user").stamped(7).commit_seq == 7
    assert list(inspect.signature(Task).parameters)[:3] == ["id", "conversation_id", "kind"]


def test_refuses_what_it_cannot_rebuild() -> None:
    with pytest.raises(TypeError):
        direct_init(type("NotADataclass", (), {}))
