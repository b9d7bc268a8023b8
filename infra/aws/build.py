"""Build the Lambda function's code: the project and every dependency it imports, as
wheels for the template's runtime and architecture, in one directory.

``python infra/aws/build.py OUT [--zip FILE]`` (``sam build`` runs it through the
template's Makefile, with ``OUT`` = SAM's artifact directory; ``--no-build --zip FILE``
only zips an ``OUT`` already built):

1. the project (``core``, ``runtimes``, ``remote_env`` and their package data, as
   ``pip install .`` lays them out; nothing of ``tests/``);
2. ``infra/aws/requirements.txt``, for the template's ``Runtime`` (``python3.X``) and
   ``Architectures`` (``x86_64`` or ``arm64``): manylinux wheels only, never a build on
   this machine, so what lands is what runs on Lambda whatever this machine is;
3. bytecode, compiled by the runtime's Python version if this machine has it;
4. checks: no ``tests`` package, and within Lambda's 250 MB limit for unzipped code —
   the size is printed.

Runs on any Python 3.11+ with pip (the wheels' target is chosen by flags, not by the
interpreter); needs the package index. Bytecode is compiled by an interpreter of the
runtime's version when this machine has one (``python3.X`` on the path, or pyenv's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["LIMIT_BYTES", "build", "runtime_of", "runtime_python", "size_of", "write_zip"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TEMPLATE = HERE / "template.yaml"
REQUIREMENTS = HERE / "requirements.txt"
MIB = 1024 * 1024
LIMIT_BYTES = 250 * MIB
"""Lambda's limit on a function's unzipped code (layers included)."""

# manylinux2014 (glibc 2.17) covers most wheels; a few projects publish only newer tags.
# Lambda's Python 3.12+ runtimes run on Amazon Linux 2023 (glibc 2.34), so both load.
_PLATFORMS = {
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}


def runtime_of(template: str) -> tuple[str, str]:
    """The function's Python version (``"3.13"``) and architecture (``"x86_64"``), read
    from the template's ``Runtime`` and ``Architectures``."""
    runtime = re.search(r"^\s+Runtime:\s*python(3\.\d+)\s*$", template, re.MULTILINE)
    arch = re.search(r"^\s+Architectures:\s*\n\s+-\s*(\w+)\s*$", template, re.MULTILINE)
    if runtime is None or arch is None or arch.group(1) not in _PLATFORMS:
        raise ValueError("the template names no python3.X Runtime and x86_64/arm64 architecture")
    return runtime.group(1), arch.group(1)


def size_of(directory: Path) -> tuple[int, int]:
    """Total bytes and number of files below ``directory``."""
    files = [p for p in directory.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(p.stat().st_size for p in files), len(files)


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", *args]
    subprocess.run(command, check=True, cwd=ROOT)


def runtime_python(version: str) -> str | None:
    """An interpreter of the runtime's version on this machine, if there is one."""
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(
        str(p) for p in Path.home().glob(f".pyenv/versions/{version}.*/bin/python3")
    )
    for candidate in candidates:
        if candidate is None:
            continue
        probe = [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
        found = subprocess.run(probe, capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip() == version:
            return candidate
    return None


def _compile(out: Path, version: str) -> None:
    """Bytecode by the runtime's own version: Lambda's code directory is read-only, so
    without it every cold start compiles each module it imports (the handler's imports
    took 1.2 s of CPU instead of 0.5 s). Checked by hash, never by timestamp: an unzipped
    file's mtime says nothing."""
    python = runtime_python(version)
    if python is None:
        print(f"bytecode: not compiled (no python{version} here): cold starts compile it")
        return
    command = [python, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash"]
    subprocess.run([*command, str(out)], check=True, stdout=subprocess.DEVNULL)
    print(f"bytecode: compiled by {python}")


def build(out: Path) -> int:
    """Build into ``out`` (emptied first); returns the unzipped size in bytes."""
    version, arch = runtime_of(TEMPLATE.read_text())
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _pip("--no-deps", "--target", str(out), str(ROOT))
    platforms = [arg for p in _PLATFORMS[arch] for arg in ("--platform", p)]
    _pip(
        "--target",
        str(out),
        "--implementation",
        "cp",
        "--python-version",
        version,
        "--only-binary=:all:",
        *platforms,
        "--requirement",
        str(REQUIREMENTS),
    )
    # Console scripts point at this machine's interpreter; Lambda never runs them.
    shutil.rmtree(out / "bin", ignore_errors=True)
    _compile(out, version)
    if (out / "tests").exists():
        raise SystemExit(f"{out}: a dependency brought a top-level 'tests' package")
    size, count = size_of(out)
    print(
        f"artifact {out}: python{version} {arch}, {count} files, "
        f"{size / MIB:.1f} MiB unzipped (Lambda's limit: {LIMIT_BYTES / MIB:.0f} MiB)"
    )
    if size > LIMIT_BYTES:
        raise SystemExit(f"{out}: {size} bytes exceeds Lambda's limit of {LIMIT_BYTES} bytes")
    return size


def write_zip(directory: Path, target: Path) -> int:
    """Zip ``directory`` as Lambda unpacks it (paths relative to it); returns the size."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    size = target.stat().st_size
    print(f"artifact {target}: {size / MIB:.1f} MiB zipped")
    return size


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the directory to build into (emptied first)")
    parser.add_argument("--zip", type=Path, help="also write the directory as this zip file")
    parser.add_argument(
        "--no-build", action="store_true", help="only zip OUT as built (by sam build, say)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    if not args.no_build:
        build(args.out.resolve())
    if args.zip is not None:
        write_zip(args.out.resolve(), args.zip.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
