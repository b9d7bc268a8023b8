"""``core.readonly``: records are read-only to mypy, and values (equal by their fields) at
run time, without the cost of ``frozen=True`` (docs/performance.md)."""

from __future__ import annotations

import dataclasses
import gc
from pathlib import Path

import pytest
from mypy import api

from core.readonly import readonly
from core.records import ErrorInfo


@readonly
class _Point:
    x: int
    y: int = 0


@readonly(eq=False, slots=False)
class _Handle:
    name: str


def test_mypy_refuses_an_assignment_to_a_field_of_a_record(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from core.records import Entry\n"
        "from core.readonly import readonly\n"
        "@readonly\n"
        "class Local:\n"
        "    x: int\n"
        "def edit(entry: Entry, local: Local) -> None:\n"
        "    entry.kind = 'user'\n"
        "    local.x = 2\n"
    )
    args = ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache")]
    threshold = gc.get_threshold()
    try:
        out, _, status = api.run([*args, str(probe)])
    finally:
        gc.set_threshold(*threshold)  # mypy's build raises it for its own run and leaves it
    assert status == 1, out
    assert 'Property "kind" defined in "Entry" is read-only' in out
    assert 'Property "x" defined in "Local" is read-only' in out
    assert out.count("error:") == 2, out


def test_a_record_is_a_slotted_dataclass_equal_by_its_fields_and_not_hashable() -> None:
    p = _Point(1)
    assert dataclasses.is_dataclass(p) and not hasattr(p, "__dict__")
    assert p == _Point(1, 0) and p != _Point(2)
    with pytest.raises(TypeError, match="unhashable"):
        hash(p)
    assert dataclasses.replace(p, y=3) == _Point(1, 3)
    assert repr(p) == "_Point(x=1, y=0)"
    assert ErrorInfo("boom") == ErrorInfo("boom", None)


def test_eq_false_keeps_identity_comparison() -> None:
    a, b = _Handle("x"), _Handle("x")
    assert a != b and a == a
    assert len({a, b}) == 2
    assert a.__dict__ == {"name": "x"}
