"""Build the deployable Worker directory: ``python infra/cloudflare/build.py [--out DIR]``.

The layout is the one ``pywrangler sync`` leaves for ``wrangler deploy`` (run
``wrangler`` inside DIR):

* ``wrangler.toml`` — this directory's, unchanged (``main = "src/entry.py"``);
* ``src/entry.py`` and, beside it, the repository's own modules the entry imports,
  directly or not (found by :mod:`modulefinder`, which reads imports without running
  them: deferred and ``TYPE_CHECKING`` imports count too) with their package data (the
  web inspector's files, which the Worker serves at ``/ui``), and nothing else — no
  tests, no local host, no sandbox server;
* ``python_modules/`` — the Pyodide wheels of every dependency in ``pyproject.toml``
  (here), installed for Python 3.14 on ``pyemscripten_2026_0_wasm32`` (the Pyodide
  314 ABI), with an empty ``pyvenv.cfg`` as pywrangler writes.

Why not ``pywrangler`` itself: its ``sync`` creates a Python 3.14 virtual environment
and an Emscripten interpreter with ``uv``, which downloads both as prebuilt toolchains,
and resolves against the Pyodide package index: none of that is reachable from a
machine that reaches only the package registries. ``pip download`` with the Pyodide
platform tag gets the same wheels from PyPI. Every dependency is pinned in
``pyproject.toml``: pip resolves with them, and a package pip installs that is not
pinned (a new transitive dependency) stops the build, so what is deployed is what the
Pyodide suite tested. ``pywrangler sync`` on a machine with network access reads the
same pins.

Needs only the standard library and pip (PyPI reachable). Exit 0 and a summary line,
or exit 1 with the reason.
"""

from __future__ import annotations

import argparse
import modulefinder
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DEFAULT_OUT = HERE / "dist"
PYODIDE_PLATFORM = "pyemscripten_2026_0_wasm32"
PYODIDE_PYTHON = "3.14"
# Written into every build; an existing DIR without it is not ours to replace.
MARKER = ".perdure-worker-build"
# The one binary wheel: for a platform without a build, pip would silently install a
# placeholder, so its extension module is checked for by name.
NATIVE = "pydantic_core/_pydantic_core.cpython-314-wasm32-emscripten.so"


class BuildError(Exception):
    """The build cannot go on; the message says why."""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(project: Path = HERE / "pyproject.toml") -> dict[str, str]:
    """``{canonical name: version}`` of the Worker's ``[project] dependencies``; each must
    be an exact ``==`` pin."""
    found: dict[str, str] = {}
    for requirement in tomllib.loads(project.read_text())["project"]["dependencies"]:
        name, sep, version = requirement.partition("==")
        if not sep or not version.strip():
            raise BuildError(f"{project.name}: {requirement!r} is not pinned with ==")
        found[_canonical(name.strip())] = version.strip()
    return found


def source_modules(entry: Path = HERE / "src/entry.py") -> list[Path]:
    """The repository's module files the entry module imports, directly or not."""
    finder = modulefinder.ModuleFinder(path=[str(ROOT)])  # the repository only
    finder.run_script(str(entry))
    found = (getattr(module, "__file__", None) for module in finder.modules.values())
    files = {Path(f).resolve() for f in found if f}
    files = {f for f in files if f.is_relative_to(ROOT)}
    files.discard(entry.resolve())
    if not files:
        raise BuildError(f"{entry} imports nothing from the repository")
    return sorted(files)


def package_data(modules: list[Path], project: Path = ROOT / "pyproject.toml") -> list[Path]:
    """The data files of the bundled packages, as ``pip install .`` installs them: the
    root ``pyproject.toml``'s ``[tool.setuptools.package-data]`` globs, for each package
    with a module in ``modules`` (the web inspector's files, which the Worker serves)."""
    config = tomllib.loads(project.read_text())
    patterns = config.get("tool", {}).get("setuptools", {}).get("package-data", {})
    bundled = {m.parent for m in modules}
    found: set[Path] = set()
    for package, globs in patterns.items():
        directory = ROOT.joinpath(*package.split("."))
        if directory.resolve() in bundled:
            for pattern in globs:
                found |= {f.resolve() for f in directory.glob(pattern) if f.is_file()}
    return sorted(found)


def _prepare(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise BuildError(f"{out} is a file, not a directory")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise BuildError(f"{out} exists and is not a Worker build; not replacing it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("built by infra/cloudflare/build.py\n")


def install_dependencies(out: Path, wanted: dict[str, str]) -> list[str]:
    """pip installs the pinned wheels for Pyodide into ``out``; returns what it
    installed (``name==version``)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--target",
        str(out),
        "--no-compile",  # the host's bytecode is not Pyodide's
        "--only-binary=:all:",
        "--platform",
        PYODIDE_PLATFORM,
        "--python-version",
        PYODIDE_PYTHON,
        "--implementation",
        "cp",
        *[f"{name}=={version}" for name, version in sorted(wanted.items())],
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise BuildError(f"pip could not install the Pyodide wheels:\n{done.stderr.strip()}")
    shutil.rmtree(out / "bin", ignore_errors=True)  # console scripts: nothing runs them
    installed = check_installed(out, wanted)
    (out / "pyvenv.cfg").touch()  # what pywrangler leaves there too
    return installed


def check_installed(out: Path, wanted: dict[str, str]) -> list[str]:
    """What pip installed into ``out`` (``name==version``), checked: exactly the pins,
    and the real ``pydantic_core`` build."""
    installed = {}
    for info in out.glob("*.dist-info"):
        name, _, version = info.name[: -len(".dist-info")].rpartition("-")
        installed[_canonical(name)] = version
    unpinned = sorted(f"{n}=={v}" for n, v in installed.items() if wanted.get(n) != v)
    if unpinned:
        raise BuildError(
            "pip installed packages that infra/cloudflare/pyproject.toml does not pin"
            f" (add them there): {', '.join(unpinned)}"
        )
    missing = sorted(set(wanted) - set(installed))
    if missing:
        raise BuildError(f"pinned but not installed: {', '.join(missing)}")
    if not (out / NATIVE).is_file():
        raise BuildError(f"{NATIVE} is missing: pip took a placeholder wheel")
    return sorted(f"{n}=={v}" for n, v in installed.items())


def build(out: Path) -> dict[str, int]:
    """Build the Worker directory at ``out`` (replacing an earlier build there)."""
    config = tomllib.loads((HERE / "wrangler.toml").read_text())
    if config.get("main") != "src/entry.py":
        raise BuildError("wrangler.toml: main must be src/entry.py")
    wanted = pins()
    modules = source_modules()
    _prepare(out)
    shutil.copy2(HERE / "wrangler.toml", out / "wrangler.toml")
    src = out / "src"
    src.mkdir()
    shutil.copy2(HERE / "src/entry.py", src / "entry.py")
    for path in [*modules, *package_data(modules)]:
        target = src / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    installed = install_dependencies(out / "python_modules", wanted)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"modules": len(modules), "packages": len(installed), "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default: {DEFAULT_OUT}")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    try:
        summary = build(out)
    except BuildError as error:
        print(f"build.py: {error}", file=sys.stderr)
        return 1
    print(
        f"built {out}: src/entry.py + {summary['modules']} repository modules,"
        f" python_modules/ with {summary['packages']} packages,"
        f" {summary['bytes'] / 1024 / 1024:.1f} MiB on disk"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
