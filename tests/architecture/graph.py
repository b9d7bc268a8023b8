"""Print the import graph of a package of ``core``, and its largest modules.

``python tests/architecture/graph.py core/harness core/tasks`` prints, for each module
of each package, its line count and the ``core`` modules it imports (those of the
package, then the rest of ``core``), marked by where
the import stands (``[type]`` under ``if TYPE_CHECKING:``, ``[deferred]`` inside a
function; unmarked: at module level); then the import cycles that touch the package and
the largest modules of ``core``. ``--root DIR`` reads another checkout (a worktree of an
older commit, for a before/after comparison); the graph is the one the architecture
test checks (:mod:`tests.architecture.test_import_graph`), built the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``tests`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.architecture.test_import_graph import (
    ROOT,
    cycles,
    import_edges,
    module_names,
)

__all__ = ["describe_package", "largest_modules", "main"]

_MARK = {"module": "", "type": " [type]", "deferred": " [deferred]"}


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def describe_package(root: Path, package: str) -> list[str]:
    """The report for ``package`` (dotted, e.g. ``core.harness``) of the tree at ``root``."""
    modules = module_names(root / "core", "core")
    members = [m for m in modules if m == package or m.startswith(package + ".")]
    if not members:
        raise SystemExit(f"no package {package} under {root / 'core'}")
    out = [
        f"== {package} ({len(members)} modules, {sum(_lines(modules[m]) for m in members)} lines)"
    ]
    graph: dict[str, set[str]] = {}
    for name in members:
        edges = import_edges(name, modules[name], modules)
        graph[name] = set(edges)
        out.append(f"{name} ({_lines(modules[name])} lines)")
        # Imports inside the package first (its internal structure), by short name.
        inside = sorted(t for t in edges if t.startswith(package + ".") or t == package)
        outside = sorted(t for t in edges if t not in inside)
        if inside:
            names = (f"{t.removeprefix(package + '.')}{_MARK[edges[t]]}" for t in inside)
            out.append("    inside: " + ", ".join(names))
        if outside:
            names = (f"{t.removeprefix('core.')}{_MARK[edges[t]]}" for t in outside)
            out.append("    core:   " + ", ".join(names))
    full = {name: set(import_edges(name, path, modules)) for name, path in modules.items()}
    touching = [c for c in cycles(full) if any(m in members for m in c)]
    out.append(f"cycles touching {package}: {len(touching)}")
    for component in touching:
        out.append(f"  {len(component)} modules: " + ", ".join(sorted(component)))
    return out


def largest_modules(root: Path, count: int) -> list[str]:
    """The ``count`` largest modules of ``core`` at ``root``, with their line counts."""
    sizes = {name: _lines(path) for name, path in module_names(root / "core", "core").items()}
    ranked = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:count]
    return [f"== the {count} largest modules of core"] + [f"{n:6d}  {m}" for m, n in ranked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="+", help="e.g. core/harness or core.tasks")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read")
    parser.add_argument("--largest", type=int, default=12, help="how many largest modules")
    args = parser.parse_args(argv)
    print(
        "legend: 'inside' = modules of the package, 'core' = the rest of core (without"
        " 'core.'); [type] under TYPE_CHECKING, [deferred] inside a function"
    )
    for package in args.packages:
        dotted = package.strip("/").replace("/", ".")
        print("\n".join(describe_package(args.root.resolve(), dotted)))
    print("\n".join(largest_modules(args.root.resolve(), args.largest)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
