"""``wrangler deploy --dry-run`` on the built Worker directory, and its size against the limit.

``python infra/cloudflare/dry_run.py [--worker DIR] [--outdir DIR]`` runs the wrangler
installed here by ``npm ci`` (``node_modules/.bin/wrangler``) inside the directory
``build.py`` made (default ``dist/``): wrangler reads its ``wrangler.toml``, collects
the entry module, the sources and ``python_modules`` exactly as ``wrangler deploy``
would upload them, writes that upload to ``--outdir`` (default ``dry-run/`` beside the
build) and stops before contacting Cloudflare. No account and no network beyond the npm
registry (wrangler asks it whether a newer version exists; telemetry is turned off).

Then it prints wrangler's own size figures ("Total Upload: … KiB / gzip: … KiB") against
Cloudflare's Worker size limit and exits 1 when the bundle does not fit. Cloudflare's
published limit has been 3 MB (Free plan) and 10 MB (Paid) after compression, and is
documented from 2026 on as 64 MiB before compression on every plan; this checks both
readings, so a bundle that passes deploys under either.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WRANGLER = HERE / "node_modules" / ".bin" / "wrangler"
KIB = 1024
MIB = 1024 * KIB
UNCOMPRESSED_LIMIT = 64 * MIB  # the 2026 limit, every plan
GZIP_LIMIT_PAID = 10 * 1000 * 1000  # the compressed limits, in MB as Cloudflare writes them
GZIP_LIMIT_FREE = 3 * 1000 * 1000
_SIZES = re.compile(r"Total Upload: ([0-9.]+) KiB / gzip: ([0-9.]+) KiB")


def sizes(output: str) -> tuple[int, int]:
    """(uncompressed, gzip) bytes from wrangler's "Total Upload" line."""
    match = _SIZES.search(output)
    if match is None:
        raise ValueError("wrangler printed no 'Total Upload: ... / gzip: ...' line")
    return round(float(match[1]) * KIB), round(float(match[2]) * KIB)


def verdict(total: int, gzip: int) -> tuple[bool, str]:
    """Whether the bundle fits, and the report line."""
    fits = total <= UNCOMPRESSED_LIMIT and gzip <= GZIP_LIMIT_PAID
    free = "fits" if gzip <= GZIP_LIMIT_FREE else "does NOT fit"
    line = (
        f"Worker bundle: {total / MIB:.2f} MiB uncompressed (limit {UNCOMPRESSED_LIMIT / MIB:.0f}"
        f" MiB), {gzip / MIB:.2f} MiB gzip (compressed limit {GZIP_LIMIT_PAID / 1e6:.0f} MB on the"
        f" Paid plan; {free} the Free plan's {GZIP_LIMIT_FREE / 1e6:.0f} MB)"
        f" — {'within the limit' if fits else 'OVER THE LIMIT'}"
    )
    return fits, line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, default=HERE / "dist")
    parser.add_argument("--outdir", type=Path, default=HERE / "dry-run")
    args = parser.parse_args(argv)
    worker = args.worker.resolve()
    if not (worker / "wrangler.toml").is_file() or not (worker / "python_modules").is_dir():
        print(f"dry_run.py: {worker} is not a built Worker: run build.py first", file=sys.stderr)
        return 1
    if not WRANGLER.exists():
        print(f"dry_run.py: {WRANGLER} is missing: run `npm ci` in {HERE}", file=sys.stderr)
        return 1
    env = {**os.environ, "WRANGLER_SEND_METRICS": "false"}
    done = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--outdir", str(args.outdir.resolve())],
        cwd=worker,
        env=env,
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    # The per-module table is long; keep wrangler's summary (sizes, bindings).
    table = ("│", "├", "┌", "└")
    print("\n".join(line for line in output.splitlines() if not line.startswith(table)))
    if done.returncode != 0:
        print(f"dry_run.py: wrangler deploy --dry-run failed (exit {done.returncode})")
        return 1
    try:
        total, gzip = sizes(output)
    except ValueError as error:
        print(f"dry_run.py: {error}", file=sys.stderr)
        return 1
    fits, line = verdict(total, gzip)
    print(line)
    return 0 if fits else 1


if __name__ == "__main__":
    sys.exit(main())
