"""The import-graph printer (``tests/architecture/graph.py``) on a planted tree: each
import is marked by where it stands, and the cycles and sizes it reports are the tree's."""

from __future__ import annotations

from pathlib import Path

from tests.architecture.graph import describe_package, largest_modules
from tests.architecture.test_import_graph import import_edges, module_names


def _plant(root: Path) -> None:
    pkg = root / "core" / "pkg"
    pkg.mkdir(parents=True)
    (root / "core" / "__init__.py").write_text("")
    (root / "core" / "other.py").write_text("from core.pkg import a\n" + "x = 1\n" * 40)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from core.pkg import b\n"
        "if TYPE_CHECKING:\n"
        "    from core.pkg.c import C\n"
        "    from core.pkg import b\n"  # also at module level: the stronger kind wins
        "def f():\n"
        "    from core import other\n"
        "    return other\n"
    )
    (pkg / "b.py").write_text("")
    (pkg / "c.py").write_text("class C: ...\n")


def test_each_edge_says_where_its_import_stands(tmp_path: Path) -> None:
    _plant(tmp_path)
    modules = module_names(tmp_path / "core", "core")
    edges = import_edges("core.pkg.a", modules["core.pkg.a"], modules)
    assert edges == {"core.pkg.b": "module", "core.pkg.c": "type", "core.other": "deferred"}


def test_the_printer_reports_the_planted_package(tmp_path: Path) -> None:
    _plant(tmp_path)
    report = describe_package(tmp_path, "core.pkg")
    assert "core.pkg.a (8 lines)" in report
    assert "    inside: b, c [type]" in report
    assert "    core:   other [deferred]" in report
    # a -> other (deferred) -> a: a cycle, though neither import runs at module level.
    assert "  2 modules: core.other, core.pkg.a" in report
    assert largest_modules(tmp_path, 1) == [
        "== the 1 largest modules of core",
        "    41  core.other",
    ]
