"""``find`` and ``grep`` over a :class:`~remote_env.server.paths.Confinement` (blocking: run
them in a worker thread).

Both are bounded: patterns and globs are matched by RE2 (linear time), every step checks
the search's :class:`~remote_env.server.budget.SearchBudget` (deadline, scan cap), and the
answer's ``stopped_by`` names the limit that cut it short.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator

from remote_env.protocol import FindArgs, FindOutput, GrepArgs, GrepOutput
from remote_env.server.budget import SearchBudget
from remote_env.server.errors import ToolFailure
from remote_env.server.globs import Glob, compile_glob
from remote_env.server.grepscan import GrepSink, scan_file
from remote_env.server.paths import Confinement
from remote_env.server.patterns import LinePattern

__all__ = ["compile_glob_arg", "find_paths", "grep_files"]

_SKIP_DIRS = frozenset({".git"})
# Entries matched between two deadline checks while walking a large directory.
_ENTRIES_PER_CHECK = 1024


def compile_glob_arg(pattern: str) -> Glob:
    """Compile a glob argument.

    Raises:
        ToolFailure: ``invalid`` (the glob does not compile).
    """
    try:
        return compile_glob(pattern)
    except ValueError as exc:
        raise ToolFailure("invalid", str(exc)) from None


def _walk(
    conf: Confinement, path: str, budget: SearchBudget
) -> Iterator[tuple[str, list[str], list[str], int]]:
    """Yield ``(relative dir, dirnames, filenames, dir fd)`` without following symlinks,
    until the budget is exhausted."""
    top = conf.open_dir(path)
    try:
        for dirpath, dirnames, filenames, dir_fd in os.fwalk(
            ".", dir_fd=top, follow_symlinks=False
        ):
            if budget.exhausted():
                return
            dirnames[:] = sorted(name for name in dirnames if name not in _SKIP_DIRS)
            filenames.sort()
            relative = "" if dirpath == "." else dirpath[2:]
            yield relative, dirnames, filenames, dir_fd
    finally:
        os.close(top)


def find_paths(conf: Confinement, args: FindArgs, glob: Glob, budget: SearchBudget) -> FindOutput:
    """Paths under ``args.path`` matching the glob; directories end with ``/``."""
    found: list[str] = []
    checked = 0
    for relative, dirnames, filenames, dir_fd in _walk(conf, args.path, budget):
        candidates = [(name, True) for name in dirnames] + [(name, False) for name in filenames]
        for name, is_dir in candidates:
            checked += 1
            if checked % _ENTRIES_PER_CHECK == 0 and budget.exhausted():
                break
            if is_dir and stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                is_dir = False  # a symlink to a directory is listed, not descended
            entry = f"{relative}/{name}" if relative else name
            if glob.matches(entry):
                if len(found) == args.limit:
                    budget.stop("limit")
                    break
                found.append(entry + "/" if is_dir else entry)
        if budget.stopped_by is not None:
            break
    return FindOutput(
        paths=sorted(found), truncated=budget.stopped_by is not None, stopped_by=budget.stopped_by
    )


def _grep_output(sink: GrepSink, budget: SearchBudget) -> GrepOutput:
    return GrepOutput(
        matches=sink.matches,
        truncated=sink.more or budget.stopped_by is not None,
        stopped_by=budget.stopped_by,
        long_lines=sink.long_lines,
    )


def grep_files(
    conf: Confinement,
    args: GrepArgs,
    pattern: LinePattern,
    glob: Glob | None,
    budget: SearchBudget,
) -> GrepOutput:
    """Search ``args.path`` (a file, or a directory tree) for ``pattern``."""
    sink = GrepSink(limit=args.limit, context=args.context, max_line_length=args.max_line_length)
    probe = conf.resolve(args.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(probe).st_mode
        if not stat.S_ISDIR(mode):
            if not stat.S_ISREG(mode):
                raise ToolFailure("invalid", f"not a regular file: {args.path}", path=args.path)
            scan_file(probe, args.path, pattern, budget, sink, named=True)
            return _grep_output(sink, budget)
    finally:
        os.close(probe)

    for relative, _dirnames, filenames, dir_fd in _walk(conf, args.path, budget):
        for name in filenames:
            if budget.exhausted():  # checked per file: tiny or binary files read little
                return _grep_output(sink, budget)
            entry = f"{relative}/{name}" if relative else name
            if glob is not None and not glob.matches(entry):
                continue
            try:
                fd = os.open(
                    name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
                )
            except OSError:
                continue  # symlink, vanished or unreadable: skipped like rg does
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    scan_file(fd, entry, pattern, budget, sink)
            finally:
                os.close(fd)
            if budget.stopped_by is not None:
                return _grep_output(sink, budget)
    return _grep_output(sink, budget)
