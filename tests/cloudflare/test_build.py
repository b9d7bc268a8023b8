"""``infra/cloudflare/build.py`` (the Worker directory) and ``dry_run.py`` (its size).

The build itself runs in ``.ci/run`` (``python build.py``, then wrangler's dry run and
the Pyodide suite booting the result); these check its decisions without PyPI: which
sources go in, what counts as a pin, what an install must hold, and the size verdict.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra/cloudflare"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"perdure_worker_{name}", INFRA / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


build = _load("build")
dry_run = _load("dry_run")


def test_the_sources_are_what_the_entry_imports_and_nothing_else() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in build.source_modules()}
    for needed in (
        "runtimes/cloudflare/worker.py",  # the entry's classes
        "runtimes/cloudflare/storage.py",
        "runtimes/actor/api/routes.py",  # imported on a first request (deferred)
        "runtimes/models/openai_http.py",
        "remote_env/client/env.py",
        "core/harness/__init__.py",
        "core/storage/sqlite/storage.py",
        "runtimes/__init__.py",  # the packages' own __init__ modules
    ):
        assert needed in files, needed
    for left_out in ("tests/", "runtimes/local/", "remote_env/server/", "runtimes/aws/"):
        assert not [f for f in files if f.startswith(left_out)], left_out
    assert "infra/cloudflare/src/entry.py" not in files  # copied on its own, to src/


def test_the_bundle_carries_the_inspector_files_the_worker_serves() -> None:
    data = build.package_data(build.source_modules())
    files = {p.relative_to(ROOT).as_posix() for p in data}
    ui = ROOT / "runtimes" / "actor" / "api" / "ui"
    # Every file of the page, so a file added to it is deployed too.
    assert files == {f"runtimes/actor/api/ui/{f.name}" for f in ui.iterdir() if f.is_file()}
    assert {"index.html", "app.js", "inspector.css"} <= {p.name for p in data}


def test_every_dependency_is_an_exact_pin() -> None:
    pins = build.pins()
    assert pins["pydantic-core"] == "2.50.5"
    assert {"workers-runtime-sdk", "fastapi", "httpx", "typing-extensions"} <= set(pins)


def test_a_dependency_that_is_not_pinned_exactly_stops_the_build(tmp_path: Path) -> None:
    project = tmp_path / "pyproject.toml"
    project.write_text('[project]\nname = "w"\ndependencies = ["httpx>=0.28"]\n')
    with pytest.raises(build.BuildError, match="not pinned"):
        build.pins(project)


def _installed(target: Path, *dists: str, native: bool = True) -> Path:
    for dist in dists:
        (target / f"{dist}.dist-info").mkdir(parents=True)
    if native:
        (target / build.NATIVE).parent.mkdir(parents=True, exist_ok=True)
        (target / build.NATIVE).write_bytes(b"\0asm")
    return target


def test_an_install_must_hold_exactly_the_pins(tmp_path: Path) -> None:
    wanted = {"pydantic-core": "2.50.5", "idna": "3.20"}
    good = _installed(tmp_path / "good", "pydantic_core-2.50.5", "idna-3.20")
    assert build.check_installed(good, wanted) == ["idna==3.20", "pydantic-core==2.50.5"]
    extra = _installed(tmp_path / "extra", "pydantic_core-2.50.5", "idna-3.20", "sniffio-1.3.1")
    with pytest.raises(build.BuildError, match=r"does not pin .*sniffio==1\.3\.1"):
        build.check_installed(extra, wanted)
    other = _installed(tmp_path / "other", "pydantic_core-2.50.5", "idna-3.21")
    with pytest.raises(build.BuildError, match=r"idna==3\.21"):
        build.check_installed(other, wanted)
    placeholder = _installed(tmp_path / "ph", "pydantic_core-2.50.5", "idna-3.20", native=False)
    with pytest.raises(build.BuildError, match="placeholder"):
        build.check_installed(placeholder, wanted)


def test_a_directory_that_is_not_a_build_is_never_replaced(tmp_path: Path) -> None:
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(build.BuildError, match="not a Worker build"):
        build._prepare(mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    a_file = tmp_path / "file"
    a_file.write_text("keep me too")
    with pytest.raises(build.BuildError, match="is a file"):
        build._prepare(a_file)
    assert a_file.read_text() == "keep me too"
    earlier = tmp_path / "dist"
    build._prepare(earlier)
    (earlier / "stale.py").write_text("")
    build._prepare(earlier)  # an earlier build is replaced whole
    assert sorted(p.name for p in earlier.iterdir()) == [build.MARKER]


def test_the_size_verdict_reads_wranglers_figures() -> None:
    out = "Attaching additional modules:\nTotal Upload: 11437.46 KiB / gzip: 2919.03 KiB\n"
    total, gzip = dry_run.sizes(out)
    assert (total, gzip) == (round(11437.46 * 1024), round(2919.03 * 1024))
    fits, line = dry_run.verdict(total, gzip)
    assert fits and "11.17 MiB uncompressed" in line and "fits the Free plan" in line
    fits, line = dry_run.verdict(total, 11 * 1000 * 1000)
    assert not fits and "OVER THE LIMIT" in line
    fits, _ = dry_run.verdict(65 * 1024 * 1024, gzip)
    assert not fits
    with pytest.raises(ValueError, match="Total Upload"):
        dry_run.sizes("--dry-run: exiting now.")
