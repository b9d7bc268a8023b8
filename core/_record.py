"""``record``: ``@dataclass`` for core's plain records, without compiling source per class.

On CPython 3.11 ``@dataclass`` builds each generated method (``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``) by ``exec`` of source text
written for that class: ~0.4-0.5 ms a class, and core defines ~90 of them on the import
path of every process (about 35 ms of the recovery benchmark's ~170 ms of imports).
``record`` makes the same class with the same methods for the shapes core uses:

* ``__init__`` is compiled once per *shape* (how many fields, and which of them take a
  default factory, are ``init=False`` or end in ``__post_init__``) with placeholder
  names; each class gets that code with its own names swapped in (``code.replace``),
  so it runs the same bytecode a generated ``__init__`` would (per-instance cost is
  unchanged: ``object.__setattr__`` per field for frozen records, a store per field
  otherwise, defaults as the function's defaults);
* ``__eq__``, ``__hash__`` and ``__repr__`` are compiled the same way, once per field
  count, and specialized when first called (most records are never compared, hashed
  or printed); the frozen ``__setattr__`` / ``__delattr__`` and the slotted pickling
  pair are closures over the class's field names.

The class is a real dataclass to everything else: ``__dataclass_fields__`` holds
``dataclasses.Field`` objects and ``__dataclass_params__`` the parameters, so
``dataclasses.fields`` / ``replace`` / ``asdict`` / ``is_dataclass`` and pydantic treat
it as one. Anything outside those shapes -- a base class other than ``object`` or
``Generic``, ``ClassVar`` / ``InitVar`` / ``KW_ONLY``, a method ``@dataclass`` would
generate written by hand, a mutable default and so on -- goes to
``dataclasses.dataclass`` unchanged (``record`` takes ``eq``, ``frozen`` and ``slots``;
a class that needs ``order`` or ``kw_only`` uses ``dataclass``), as does every class on
Python 3.13+, whose
``dataclasses`` already compiles a class's methods in one batch (Pyodide runs 3.14;
there ``record`` is ``dataclass``).
``tests/core/test_record.py`` checks ``record`` against ``dataclass`` class by class.
"""

from __future__ import annotations

import abc
import builtins
import dataclasses
import inspect
import re
import reprlib
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any, Generic, TypeVar, cast, dataclass_transform, overload

__all__ = ["record"]

T = TypeVar("T")

# Where ``dataclasses`` batches its ``exec`` (``_FuncBuilder``: 3.13+, and so Pyodide's
# 3.14), it does all the work: ``record`` relies on its 3.11/3.12 internals only.
_FAST_PATH = not hasattr(dataclasses, "_FuncBuilder") and all(
    hasattr(dataclasses, name) for name in ("_FIELD", "_DataclassParams")
)

# Methods ``@dataclass`` would add or refuse to overwrite: a class defining one by hand
# goes to ``dataclass``, which knows the rules for each.
_GENERATED = frozenset(
    {
        "__init__",
        "__repr__",
        "__eq__",
        "__hash__",
        "__setattr__",
        "__delattr__",
        "__getstate__",
        "__setstate__",
        "__match_args__",
        "__slots__",
        "__dataclass_fields__",
        "__dataclass_params__",
        "__replace__",
    }
)


class _Factory:
    """The default of a parameter whose field has a ``default_factory`` (``dataclasses``'
    own sentinel is private); its repr matches, so the signature reads the same."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()

# Per-field kinds of an ``__init__`` shape: a parameter ("p"), a parameter defaulting to
# a factory ("f"), ``init=False`` with a default ("d") or with a factory ("g").
_Shape = tuple[str, bool, bool, tuple[str, ...]]
_codes: dict[_Shape, CodeType] = {}
_ATTRS = tuple(f"_a{i}" for i in range(256))
_PARAMS = tuple(f"_p{i}" for i in range(256))


def _source(shape: _Shape) -> str:
    """A method's source with placeholder names: attribute ``_a<i>`` (a name, or a
    constant for ``object.__setattr__`` and ``__repr__``), parameter ``_p<i>``, default
    ``_d<i>`` and factory ``_f<i>`` (globals of the class's own function). The three
    methods that depend only on how many fields they cover (``__eq__``, ``__hash__``,
    ``__repr__``) are compiled together."""
    method, frozen, post_init, kinds = shape
    attrs = [f"_a{i}" for i in range(len(kinds))]
    if method != "__init__":
        mine = "".join(f"self.{a}," for a in attrs)
        theirs = "".join(f"other.{a}," for a in attrs)
        shown = ", ".join(f"{a}={{self.{a}!r}}" for a in attrs)
        return (
            "def __eq__(self, other):\n"
            "    if other.__class__ is self.__class__:\n"
            f"        return ({mine})==({theirs})\n"
            "    return NotImplemented\n"
            f"def __hash__(self):\n    return hash(({mine}))\n"
            f'def __repr__(self):\n    return self.__class__.__qualname__ + f"({shown})"\n'
        )
    params = ["self"] + [f"_p{i}" for i, k in enumerate(kinds) if k in "pf"]
    lines = []
    for i, k in enumerate(kinds):
        value = {
            "p": f"_p{i}",
            "f": f"_f{i}() if _p{i} is _FACTORY else _p{i}",
            "d": f"_d{i}",
            "g": f"_f{i}()",
        }[k]
        lines.append(f"_osa(self, '_a{i}', {value})" if frozen else f"self._a{i} = {value}")
    if post_init:
        lines.append("self.__post_init__()")
    body = "\n    ".join(lines or ["pass"])
    return f"def __init__({', '.join(params)}):\n    {body}\n"


_PLACEHOLDER = re.compile(r"\b_a(\d+)\b")


def _method(shape: _Shape, names: tuple[str, ...], scope: dict[str, Any]) -> FunctionType:
    """The method for ``shape``, compiled once per shape, with this class's field
    ``names`` swapped in for the placeholders (in names, locals and constants)."""
    code = _codes.get(shape)
    if code is None:
        method, _, _, kinds = shape
        module = compile(_source(shape), "<record>", "exec")
        for c in module.co_consts:
            if isinstance(c, CodeType):
                _codes[(c.co_name, False, False, kinds) if method != "__init__" else shape] = c
        code = _codes[shape]
    swaps = dict(zip(_ATTRS, names, strict=False)) | dict(zip(_PARAMS, names, strict=False))

    def swap(seq: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(swaps.get(v, v) if isinstance(v, str) else v for v in seq)

    if code.co_name == "__repr__":
        # The f-string's literal parts ("(_a0=", ", _a1=", ...) name the fields too.
        consts = tuple(
            _PLACEHOLDER.sub(lambda m: names[int(m.group(1))], v) if isinstance(v, str) else v
            for v in code.co_consts
        )
    else:
        consts = swap(code.co_consts)
    code = code.replace(
        co_varnames=swap(code.co_varnames), co_names=swap(code.co_names), co_consts=consts
    )
    return FunctionType(code, scope, code.co_name)


def _has_class_cell(cls: type) -> bool:
    """Whether a method uses ``super()`` / ``__class__``: the slotted copy would need its
    cell rebound, which ``dataclass`` knows how to do (or to refuse)."""
    for v in cls.__dict__.values():
        for fn in (v, getattr(v, "__func__", None), getattr(v, "fget", None)):
            code = getattr(fn, "__code__", None)
            if isinstance(code, CodeType) and "__class__" in code.co_freevars:
                return True
    return False


def _fields(cls: type) -> list[dataclasses.Field[Any]] | None:
    """The class's fields as ``dataclass`` would collect them, or ``None`` when the class
    needs something only ``dataclass`` does."""
    annotations = inspect.get_annotations(cls)  # the class's own, unevaluated
    fields = []
    for name, kind in annotations.items():
        text = kind if isinstance(kind, str) else repr(kind)
        if "ClassVar" in text or "InitVar" in text or "KW_ONLY" in text or name == "self":
            return None
        default = getattr(cls, name, dataclasses.MISSING)
        if isinstance(default, dataclasses.Field):
            f = default
            if f.kw_only is True or f.default.__class__.__hash__ is None:
                return None
        else:
            if default is not dataclasses.MISSING and (
                default.__class__.__hash__ is None or hasattr(default, "__set_name__")
            ):
                return None  # dataclass raises for a mutable default
            f = dataclasses.field(default=cast(Any, default))
        f.name = name
        f.type = kind
        f._field_type = dataclasses._FIELD  # type: ignore[attr-defined]  # what fields() reads
        f.kw_only = False
        fields.append(f)
    for name, value in cls.__dict__.items():
        if isinstance(value, dataclasses.Field) and name not in annotations:
            return None  # dataclass raises: a field without a type
    return fields


_params: dict[tuple[bool, bool, bool], Any] = {}


def _dataclass_params(eq: bool, frozen: bool, slots: bool) -> Any:
    key = (eq, frozen, slots)
    p = _params.get(key)
    if p is None:
        make = dataclasses._DataclassParams  # type: ignore[attr-defined]
        every = {
            "init": True,
            "repr": True,
            "eq": eq,
            "order": False,
            "unsafe_hash": False,
            "frozen": frozen,
            "match_args": True,
            "kw_only": False,
            "slots": slots,
            "weakref_slot": False,
        }
        init = make.__init__.__code__
        names = init.co_varnames[1 : init.co_argcount]  # 6 parameters in 3.11, 10 in 3.12
        p = _params[key] = make(**{k: v for k, v in every.items() if k in names})
    return p


def _build(cls: type, eq: bool, frozen: bool, slots: bool) -> type | None:
    if (
        type(cls) is not type
        or any(b is not object and b is not Generic for b in cls.__bases__)
        or not _GENERATED.isdisjoint(cls.__dict__)
        or ("__post_init__" in cls.__dict__ and not callable(cls.__dict__["__post_init__"]))
        or (slots and _has_class_cell(cls))
    ):
        return None
    fields = _fields(cls)
    if fields is None or len(fields) > len(_ATTRS):
        return None
    kinds = []
    seen_default = False
    for f in fields:
        has_default = f.default is not dataclasses.MISSING
        has_factory = f.default_factory is not dataclasses.MISSING
        if not f.init:
            if not (has_default or has_factory):
                return None  # an uninitialised field: dataclass's business
            kinds.append("g" if has_factory else "d")
        elif has_default or has_factory:
            seen_default = True
            kinds.append("f" if has_factory else "p")
        elif seen_default:
            return None  # dataclass raises: non-default argument follows default argument
        else:
            kinds.append("p")

    names = tuple(f.name for f in fields)
    cls.__dataclass_params__ = _dataclass_params(eq, frozen, slots)  # type: ignore[attr-defined]
    cls.__dataclass_fields__ = dict(zip(names, fields, strict=True))  # type: ignore[attr-defined]
    for f in fields:
        # As dataclass: a default stays as the class attribute, a bare Field goes.
        if isinstance(cls.__dict__.get(f.name), dataclasses.Field):
            if f.default is dataclasses.MISSING:
                delattr(cls, f.name)
            else:
                setattr(cls, f.name, f.default)
    if slots:
        body = dict(cls.__dict__)
        for name in (*names, "__dict__", "__weakref__"):
            body.pop(name, None)
        body["__slots__"] = names
        qualname = cls.__qualname__
        cls = type(cls.__name__, cls.__bases__, body)
        cls.__qualname__ = qualname

    scope: dict[str, Any] = {
        "__builtins__": builtins,
        "__name__": cls.__module__,
        "_osa": object.__setattr__,
        "_FACTORY": _FACTORY,
    }
    defaults = []
    for i, (f, k) in enumerate(zip(fields, kinds, strict=True)):
        if k in "fg":
            scope[f"_f{i}"] = f.default_factory
        if k == "d":
            scope[f"_d{i}"] = f.default
        if k == "f":
            defaults.append(_FACTORY)
        elif k == "p" and f.default is not dataclasses.MISSING:
            defaults.append(f.default)
    post_init = "__post_init__" in cls.__dict__
    init = _method(("__init__", frozen, post_init, tuple(kinds)), names, scope)
    init.__defaults__ = tuple(defaults)
    init.__annotations__ = {f.name: f.type for f in fields if f.init} | {"return": None}
    _install(cls, init)

    # __repr__, __eq__ and __hash__ are specialized when first called: most records of a
    # process are never printed, compared or hashed (~40% of record()'s cost otherwise).
    shown = tuple(f.name for f in fields if f.repr)

    def plain(method: str, subset: tuple[str, ...]) -> Callable[[], Callable[..., Any]]:
        def build() -> Callable[..., Any]:
            fn = _method((method, False, False, ("p",) * len(subset)), subset, scope)
            return reprlib.recursive_repr()(fn) if method == "__repr__" else fn

        return build

    _install(cls, _on_first_call(cls, "__repr__", plain("__repr__", shown)))
    if eq:
        compared = tuple(f.name for f in fields if f.compare)
        _install(cls, _on_first_call(cls, "__eq__", plain("__eq__", compared)))
        if frozen:
            hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            _install(cls, _on_first_call(cls, "__hash__", plain("__hash__", hashed)))
        else:
            cls.__hash__ = None  # type: ignore[assignment]
    if frozen:
        _install(cls, _frozen_fn(cls, names, "__setattr__"))
        _install(cls, _frozen_fn(cls, names, "__delattr__"))
        if slots:
            _install(cls, _getstate_fn(names))
            _install(cls, _setstate_fn(names))
    cls.__match_args__ = tuple(f.name for f in fields if f.init)  # type: ignore[attr-defined,misc]
    if cls.__doc__ is None:
        cls.__doc__ = cls.__name__ + _signature_text(cls, fields, defaults)
    abc.update_abstractmethods(cls)
    return cls


def _signature_text(cls: type, fields: list[dataclasses.Field[Any]], defaults: list[Any]) -> str:
    """``str(inspect.signature(cls))`` without `` -> None``, the docstring ``dataclass``
    gives an undocumented class. Written out when every annotation is a string (what
    ``from __future__ import annotations`` makes: inspect shows its repr), which skips
    building a ``Signature``; otherwise inspect's own."""
    params = [f for f in fields if f.init]
    if not all(isinstance(f.type, str) for f in params):
        try:
            return str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            return ""
    required = len(params) - len(defaults)
    shown = [
        f"{f.name}: {f.type!r}" + (f" = {defaults[i - required]!r}" if i >= required else "")
        for i, f in enumerate(params)
    ]
    return f"({', '.join(shown)})"


def _on_first_call(cls: type, name: str, build: Callable[[], Callable[..., Any]]) -> Any:
    """A stand-in for method ``name`` that builds the real one, puts it on ``cls`` in its
    place, and calls it: from then on the class has what ``dataclass`` would have given."""

    def first_call(self: Any, *args: Any) -> Any:
        real = build()
        _install(cls, real)
        return real(self, *args)

    first_call.__name__ = name
    return first_call


def _install(cls: type, fn: Callable[..., Any]) -> None:
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    setattr(cls, fn.__name__, fn)


def _frozen_fn(cls: type, names: tuple[str, ...], method: str) -> Callable[..., Any]:
    """A frozen record's ``__setattr__`` / ``__delattr__``: what ``dataclass`` generates
    (its ``super(cls, self)`` is ``object`` here: a record's only bases are ``object``
    and ``Generic``)."""
    if method == "__delattr__":

        def __delattr__(self: Any, name: str) -> None:
            if type(self) is cls or name in names:
                raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        return __delattr__

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    return __setattr__


def _getstate_fn(names: tuple[str, ...]) -> Callable[..., Any]:
    """Pickling and copying a frozen slotted record (its ``__setattr__`` refuses)."""

    def __getstate__(self: Any) -> list[Any]:
        return [getattr(self, n) for n in names]

    return __getstate__


def _setstate_fn(names: tuple[str, ...]) -> Callable[..., Any]:
    def __setstate__(self: Any, state: list[Any]) -> None:
        for n, v in zip(names, state, strict=False):
            object.__setattr__(self, n, v)

    return __setstate__


@overload
def record(cls: type[T], /) -> type[T]: ...
@overload
def record(
    *, eq: bool = True, frozen: bool = False, slots: bool = False
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(
    cls: type[T] | None = None, /, *, eq: bool = True, frozen: bool = False, slots: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """``@dataclass(eq=..., frozen=..., slots=...)``, built without per-class ``exec``
    where the class allows it (see the module's docstring)."""

    def wrap(c: type[T]) -> type[T]:
        built = _build(c, eq, frozen, slots) if _FAST_PATH else None
        if built is None:
            return dataclasses.dataclass(c, eq=eq, frozen=frozen, slots=slots)
        return built

    return wrap if cls is None else wrap(cls)
