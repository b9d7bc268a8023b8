"""A cheaper ``__init__`` for frozen, slotted dataclasses (the records of :mod:`core.records`).

A frozen dataclass's generated ``__init__`` sets every field through
``object.__setattr__``: per field, an argument tuple, a lookup of the name along the
type's MRO and the generic attribute machinery, only to reach the slot's descriptor.
:func:`direct_init` makes an ``__init__`` with the same signature and defaults that
calls each slot descriptor's ``__set__`` itself: half the cost of building a record,
which the kernel does a dozen times per tool round (``Task.evolve``, task states). The
instances are the same: still frozen (``__setattr__`` refuses), equal, hashable and
printed as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["KEEP", "direct_init"]

C = TypeVar("C", bound=type)

_MISSING_ARG: Any = object()  # an argument left out whose default comes from a factory

KEEP: Any = object()
"""The default of a copy method's arguments (``Task.evolve``): the field is kept."""


def direct_init(cls: C) -> C:
    """Replace the ``__init__`` of the frozen, slotted dataclass ``cls`` (see the module
    docstring). Fields with ``init=False`` get their default, as dataclasses does."""
    if not (dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__):
        raise TypeError(f"{cls.__name__} is not a slotted dataclass")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__} has a __post_init__, which direct_init does not call")
    names: dict[str, Any] = {"_MISSING_ARG": _MISSING_ARG}
    args: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: keyword-only fields are not supported")
        setter = f"_set_{f.name}"
        names[setter] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            names[f"_default_{f.name}"] = f.default
            value = f.name if f.init else f"_default_{f.name}"
            if f.init:
                args.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            names[f"_factory_{f.name}"] = f.default_factory
            if f.init:
                args.append(f"{f.name}=_MISSING_ARG")
                value = f"_factory_{f.name}() if {f.name} is _MISSING_ARG else {f.name}"
            else:
                value = f"_factory_{f.name}()"
        else:
            if not f.init:
                raise TypeError(f"{cls.__name__}.{f.name}: init=False needs a default")
            args.append(f.name)
            value = f.name
        body.append(f"    {setter}(self, {value})")
    source = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(body or ["    pass"])
    exec(source, names)  # generated from the dataclass's own field names
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
