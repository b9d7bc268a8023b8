"""The import graph of ``core``, built from the source, and the rules it must keep.

Every ``import``/``from ... import`` statement counts wherever it stands: at module
level, under ``if TYPE_CHECKING:``, or inside a function. Hiding a cycle behind a
deferred import still leaves the reader with a cycle, so all of them are edges.
Implicit imports of parent packages (running ``core/harness/__init__.py`` before
``core.harness.generation.task``) are not edges: every submodule would otherwise "import"
its package's facade, which is how packages work, not a design dependency.

Rules checked:

* no import cycle within ``core.harness`` and none passing through it;
* the cycles that remain elsewhere in ``core`` are exactly those listed in
  :data:`KNOWN_CYCLES` (none since issue 17, item 2 broke session <-> tasks), printed when the test
  runs; a new cycle fails, and so does a listed one that is gone (remove it from the list);
* module size, in every package (``core``, ``runtimes``, ``remote_env``): a module is as
  long as its one job needs, so there is no hard cap, but one over 600 lines says in its
  docstring (``Size:``) why it is still one job. A split follows a seam, never a count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"
PACKAGES = ("core", "runtimes", "remote_env")

KNOWN_CYCLES: list[frozenset[str]] = []
"""Strongly connected components of ``core``'s import graph that exist today; each
must go away, none may be added."""

REASON_LINES = 600


# ---------------------------------------------------------------------- the graph


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package rooted at ``root``: dotted name -> file."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


ImportKind = str
"""Where an import stands: ``"module"`` (runs on import), ``"deferred"`` (inside a
function) or ``"type"`` (under ``if TYPE_CHECKING:``, never runs)."""

_STRENGTH = {"type": 0, "deferred": 1, "module": 2}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_statements(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, ImportKind]]:
    """Every import statement of ``tree`` with where it stands (see :data:`ImportKind`)."""
    found: list[tuple[ast.Import | ast.ImportFrom, ImportKind]] = []
    # An explicit stack, not recursion: (node, the kind its imports get).
    todo: list[tuple[ast.AST, ImportKind]] = [(tree, "module")]
    while todo:
        node, kind = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append((node, kind))
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend((child, "type") for child in node.body)
            todo.extend((child, kind) for child in node.orelse)
            continue
        inner = kind
        if kind == "module" and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inner = "deferred"
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))
    return found


def import_edges(module: str, path: Path, modules: dict[str, Path]) -> dict[str, ImportKind]:
    """The package modules ``module`` imports, anywhere in its source, each with the
    strongest place it is imported from (module level over deferred over TYPE_CHECKING)."""
    is_package = path.name == "__init__.py"
    found: dict[str, ImportKind] = {}
    for node, kind in _import_statements(ast.parse(path.read_text(), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` if there is one.
            targets = [f"{base}.{alias.name}" for alias in node.names] or [base]
        for target in targets:
            resolved = _resolve(target, modules)
            known = resolved is not None and resolved != module
            if known and _STRENGTH[kind] >= _STRENGTH[found.get(resolved, "type")]:
                found[resolved] = kind
    return found


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``module`` imports, anywhere in its source."""
    return set(import_edges(module, path, modules))


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    modules = module_names(root, package)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component: set[str] = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _describe(component: frozenset[str], graph: dict[str, set[str]]) -> str:
    edges = [f"  {a} -> {b}" for a in sorted(component) for b in sorted(graph[a]) if b in component]
    return f"cycle of {len(component)} modules:\n" + "\n".join(edges)


# ---------------------------------------------------------------------- the rules


@pytest.fixture(scope="module")
def core_graph() -> dict[str, set[str]]:
    return import_graph(CORE, "core")


def test_the_graph_sees_core(core_graph: dict[str, set[str]]) -> None:
    assert "core.harness.harness" in core_graph
    assert "core.harness.generation.task" in core_graph["core.harness.harness"]


def test_no_import_cycle_within_or_through_core_harness(
    core_graph: dict[str, set[str]],
) -> None:
    through = [c for c in cycles(core_graph) if any(m.startswith("core.harness") for m in c)]
    assert not through, "\n".join(_describe(c, core_graph) for c in through)


def test_the_remaining_cycles_in_core_are_the_known_ones(
    core_graph: dict[str, set[str]],
) -> None:
    remaining = cycles(core_graph)
    for component in remaining:
        print(_describe(component, core_graph))  # shown with -s: the debt still owed
    assert sorted(map(sorted, remaining)) == sorted(map(sorted, KNOWN_CYCLES))


def test_the_cycle_finder_catches_a_planted_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "planted"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    # a -> b only under TYPE_CHECKING, b -> c at module level, c -> a inside a function.
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.sub import b\n"
    )
    (pkg / "sub" / "b.py").write_text("from ..c import thing\n")
    (pkg / "c.py").write_text("def thing():\n    import planted.a\n    return planted.a\n")
    (pkg / "d.py").write_text("from planted import c\n")  # imports into the cycle only
    graph = import_graph(pkg, "planted")
    assert graph["planted.sub.b"] == {"planted.c"}
    assert cycles(graph) == [frozenset({"planted.a", "planted.sub.b", "planted.c"})]
    (pkg / "c.py").write_text("def thing():\n    return 1\n")
    assert cycles(import_graph(pkg, "planted")) == []


# ---------------------------------------------------------------------- module size


def _size_problem(name: str, path: Path) -> str | None:
    lines = len(path.read_text().splitlines())
    if lines > REASON_LINES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "Size:" not in doc:
            return f"{name}: {lines} lines (over {REASON_LINES}: say why under 'Size:')"
    return None


def test_every_module_keeps_to_the_size_rule() -> None:
    modules = {
        name: path
        for package in PACKAGES
        for name, path in module_names(ROOT / package, package).items()
    }
    sizes = {name: len(path.read_text().splitlines()) for name, path in modules.items()}
    for name, lines in sorted(sizes.items(), key=lambda kv: -kv[1])[:8]:
        print(f"{lines:5d} {name}")  # shown with -s
    problems = [p for name, path in modules.items() if (p := _size_problem(name, path))]
    assert not problems, "\n".join(problems)


def test_the_size_rule_catches_a_long_module(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text('"""A module."""\n' + "x = 1\n" * 700)
    assert _size_problem("long", long) is not None
    long.write_text('"""A module.\n\nSize: one table of data.\n"""\n' + "x = 1\n" * 700)
    assert _size_problem("long", long) is None
