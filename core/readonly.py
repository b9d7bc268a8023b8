"""``readonly``: how core declares a record (a slotted dataclass nothing assigns to).

Core's records are values: built once, copied with a change (``Task.evolve``,
``dataclasses.replace``), never assigned to. ``@readonly`` makes such a class a
``@dataclass(slots=True)`` that type checkers treat as ``frozen=True``
(``typing.dataclass_transform(frozen_default=True)``): mypy refuses an assignment to one
of its fields anywhere in the checked code, as it does for a frozen dataclass.

At run time nothing refuses one. That is the point: ``frozen=True`` makes ``__init__`` set
every field through ``object.__setattr__``, and on CPython 3.11 and 3.12 it compiles a
``__setattr__``, a ``__delattr__`` and a ``__hash__`` for each class at import. For the
about 80 records a recovering process defines and the dozens a tool round builds, that
was about an eighth of the instructions of both the path from process start to the first
resumed phase and a round (docs/performance.md, "Records are read-only dataclasses").
Hence, too, a record is not hashable (``eq`` without ``frozen`` sets ``__hash__`` to
``None``): nothing in perdure hashes one, and most hold JSON objects that made hashing
one fail anyway.

A record that must refuse an assignment at run time stays
``@dataclass(frozen=True, slots=True)``: the scan queries, which a caller holds across
pages (``tests/core/storage/test_scan_queries.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field
from typing import TypeVar, dataclass_transform, overload

__all__ = ["readonly"]

T = TypeVar("T")


@overload
def readonly(cls: type[T], /) -> type[T]: ...


@overload
def readonly(*, eq: bool = True, slots: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field, Field))
def readonly(
    cls: type[T] | None = None, /, *, eq: bool = True, slots: bool = True
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass(eq=eq, slots=slots)``, read-only to type checkers (module docstring).
    ``eq=False`` keeps identity comparison (and hashing) for a class whose instances are
    handles rather than values; ``slots=False`` leaves a ``__dict__`` (for a
    ``functools.cached_property``, say)."""
    make = dataclass(eq=eq, slots=slots)
    return make if cls is None else make(cls)
