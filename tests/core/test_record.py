"""``core._record.record`` makes the class ``@dataclass`` makes, method for method."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import field
from typing import Any, Generic, TypeVar

import pytest

import core
from core import _record
from core._record import record

T = TypeVar("T")


def _classes(deco: Callable[..., Any]) -> dict[str, type]:
    """The field shapes core uses, each decorated by ``deco`` (``record`` or ``dataclass``)."""

    @deco(frozen=True, slots=True)
    class Entry:
        """A docstring."""

        id: int
        kind: str
        message: object = None
        head: int | None = None

    @deco(frozen=True, slots=True)
    class Completed:
        result: object = None
        kind: str = field(default="completed", init=False)

    @deco(frozen=True)
    class Task:
        id: int
        memos: dict[str, int] = field(default_factory=dict)
        hidden: int = field(default=3, compare=False, repr=False)
        stamp: list[int] = field(default_factory=list, init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "stamp", [self.id])

    @deco
    class Mutable:
        a: int
        b: list[int] = field(default_factory=list)

    @deco(slots=True)
    class SlottedMutable:
        a: int
        b: int = 2

    @deco(frozen=True, slots=True)
    class Page(Generic[T]):
        items: tuple[T, ...]
        more: bool = False

    @deco(frozen=True, eq=False)
    class Definition:
        name: str

    @deco(frozen=True, slots=True)
    class Empty:
        pass

    @deco(frozen=True, slots=True)
    class One:
        x: float

    return {
        c.__name__: c
        for c in (Entry, Completed, Task, Mutable, SlottedMutable, Page, Definition, Empty, One)
    }


RECORDS = _classes(record)
DATACLASSES = _classes(dataclasses.dataclass)
ARGS: dict[str, tuple[Any, ...]] = {
    "Entry": (1, "user", {"text": "hi"}),
    "Completed": ({"ok": True},),
    "Task": (7,),
    "Mutable": (1,),
    "SlottedMutable": (1,),
    "Page": ((1, 2),),
    "Definition": ("d",),
    "Empty": (),
    "One": (float("nan"),),
}


def _field_facts(cls: type) -> list[tuple[Any, ...]]:
    return [
        (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.compare, f.hash, f.kw_only)
        for f in dataclasses.fields(cls)
    ]


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_the_class_is_the_one_dataclass_makes(name: str) -> None:
    mine, theirs = RECORDS[name], DATACLASSES[name]
    if _record._FAST_PATH:
        assert mine.__init__.__code__.co_filename == "<record>"  # built without exec
    assert str(inspect.signature(mine)) == str(inspect.signature(theirs))
    assert mine.__doc__ == theirs.__doc__
    assert mine.__match_args__ == theirs.__match_args__  # type: ignore[attr-defined]
    assert getattr(mine, "__slots__", None) == getattr(theirs, "__slots__", None)
    assert _field_facts(mine) == _field_facts(theirs)
    assert repr(mine.__dataclass_params__) == repr(theirs.__dataclass_params__)  # type: ignore[attr-defined]
    assert set(mine.__dict__) == set(theirs.__dict__)
    assert (mine.__hash__ is None) == (theirs.__hash__ is None)
    for method in ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__"):
        if method in theirs.__dict__ and theirs.__dict__[method] is not None:
            assert getattr(mine, method).__qualname__ == getattr(theirs, method).__qualname__


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_instances_behave_alike(name: str) -> None:
    mine = RECORDS[name](*ARGS[name])
    theirs = DATACLASSES[name](*ARGS[name])
    assert repr(mine) == repr(theirs)
    assert dataclasses.asdict(mine) == dataclasses.asdict(theirs)
    assert dataclasses.astuple(mine) == dataclasses.astuple(theirs)
    twin = dataclasses.replace(mine)
    assert (twin == mine) == (dataclasses.replace(theirs) == theirs)
    assert mine != theirs  # another class: NotImplemented both ways, as for a dataclass
    if name != "Definition":  # eq=False: hashed by identity, like any object
        assert _hash_or_error(mine) == _hash_or_error(theirs)
    # Copies go through __reduce_ex__: __getstate__ / __setstate__ for a frozen slotted one.
    for twin in (copy.copy(mine), copy.deepcopy(mine)):
        assert repr(twin) == repr(mine)
        assert twin == mine or name in ("Definition", "One")  # identity / NaN


def _hash_or_error(value: object) -> object:
    try:
        return hash(value)
    except TypeError as e:  # a dict field, as for the dataclass
        return str(e)


def test_keywords_defaults_and_factories() -> None:
    Entry, Task, Mutable = RECORDS["Entry"], RECORDS["Task"], RECORDS["Mutable"]
    e = Entry(kind="k", id=3, head=4)
    assert (e.id, e.kind, e.message, e.head) == (3, "k", None, 4)
    t1, t2 = Task(1), Task(2)
    assert t1.memos == {} and t1.memos is not t2.memos  # a fresh default each time
    assert t1.stamp == [1]  # __post_init__ ran
    assert Task(1, hidden=9) == Task(1)  # compare=False
    assert "hidden" not in repr(Task(1))
    assert RECORDS["Completed"]().kind == "completed"
    with pytest.raises(TypeError):
        Entry(1)
    with pytest.raises(ValueError, match="init=False"):
        dataclasses.replace(RECORDS["Completed"](), kind="x")
    m = Mutable(1)
    m.a = 2
    assert m == Mutable(2) and Mutable.__hash__ is None
    page = RECORDS["Page"]
    match page((1,), True):
        case page(items, more):
            assert (items, more) == ((1,), True)


def test_repr_eq_and_hash_are_specialized_on_first_call() -> None:
    Entry = _classes(record)["Entry"]
    assert "first_call" in Entry.__dict__["__hash__"].__code__.co_name or not _record._FAST_PATH
    a, b = Entry(1, "k"), Entry(1, "k")
    assert {a: 1}[b] == 1  # hash, then eq, each through its stand-in once
    assert repr(a) == "_classes.<locals>.Entry(id=1, kind='k', message=None, head=None)"
    for method in ("__hash__", "__eq__", "__repr__"):  # the real ones replaced the stand-ins
        assert Entry.__dict__[method].__code__.co_name != "first_call", method
    assert hash(a) == hash((1, "k", None, None)) and a == b and a != Entry(2, "k")


def test_frozen_records_refuse_writes() -> None:
    e = RECORDS["Entry"](1, "k")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.id = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del e.kind  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RECORDS["Task"](1).other = 1  # type: ignore[attr-defined]


def test_what_only_dataclass_does_goes_to_dataclass() -> None:
    @record(frozen=True)
    class Base:
        a: int

    @record(frozen=True)
    class Child(Base):  # a dataclass base
        b: int = 0

    @record
    class Handwritten:
        a: int

        def __repr__(self) -> str:
            return "mine"

    assert Child(1, 2).b == 2 and repr(Handwritten(1)) == "mine"
    assert Child.__init__.__code__.co_filename != "<record>"
    assert Handwritten.__init__.__code__.co_filename != "<record>"
    with pytest.raises(ValueError, match="mutable default"):

        @record
        class Mutable:
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="non-default argument"):

        @record
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]


def test_every_core_dataclass_is_built_by_record() -> None:
    """The import-time saving holds: no core record falls back to ``exec``."""
    if not _record._FAST_PATH:
        pytest.skip("dataclasses batches its exec on this Python")
    for info in pkgutil.walk_packages(core.__path__, "core."):
        if info.name.startswith("core.testing"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and dataclasses.is_dataclass(value)
            ):
                # record's classes share its parameter objects (an __init__ may since have
                # been replaced, by core.slotted.direct_init)
                made = value.__dataclass_params__  # type: ignore[attr-defined]
                assert any(made is p for p in _record._params.values()), value
