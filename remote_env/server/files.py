"""File operations over a :class:`~remote_env.server.paths.Confinement` (blocking; run them
in a worker thread).

Writes are atomic: the new content goes to a temporary file in the target's directory (created
``O_EXCL | O_NOFOLLOW`` inside a confined directory fd), is fsynced, and is renamed over the
target; then the directory is fsynced. Just before the rename, ``before_commit`` receives the
hashes of the old and new content and the result, so the op log can tell after a crash whether
the rename happened.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Callable
from typing import Literal

from remote_env.protocol import (
    EditArgs,
    EditOutput,
    LsArgs,
    LsEntryModel,
    LsOutput,
    ReadArgs,
    ReadOutput,
    WriteArgs,
    WriteOutput,
)
from remote_env.server.errors import Rejected, ToolFailure
from remote_env.server.paths import Confinement
from remote_env.server.textedit import apply_edits

__all__ = [
    "BeforeCommit",
    "edit_file",
    "file_sha256",
    "list_dir",
    "read_file",
    "write_file",
]

#: ``(pre_sha256 or None, post_sha256, result)`` called before the atomic rename.
BeforeCommit = Callable[[str | None, str, WriteOutput | EditOutput], None]


def _read_all(fd: int) -> bytes:
    with os.fdopen(fd, "rb", closefd=True) as handle:
        return handle.read()


def _split_lines(data: bytes) -> list[bytes]:
    if not data:
        return []
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    return lines


def read_file(conf: Confinement, args: ReadArgs, *, max_read_bytes: int) -> ReadOutput:
    """Return a window of lines (see ``ExecutionEnv.read`` for the exact rules)."""
    fd, info = conf.open_regular(args.path)
    if info.st_size > max_read_bytes:
        os.close(fd)
        raise ToolFailure(
            "invalid",
            f"{args.path} is {info.st_size} bytes, above the {max_read_bytes}-byte read limit; "
            "use bash (head, sed -n, tail) to look at parts of it",
            path=args.path,
        )
    data = _read_all(fd)
    lines = _split_lines(data)
    start = args.offset - 1
    stop = len(lines) if args.limit is None else min(len(lines), start + args.limit)
    window: list[bytes] = []
    used = 0
    truncated = False
    next_line_bytes: int | None = None
    for raw in lines[start:stop]:
        cost = len(raw) + (1 if window else 0)
        if args.max_bytes is not None and used + cost > args.max_bytes:
            truncated, next_line_bytes = True, len(raw)
            break
        window.append(raw)
        used += cost
    return ReadOutput(
        text=b"\n".join(window).decode("utf-8", "replace"),
        offset=args.offset,
        lines=len(window),
        total_lines=len(lines),
        total_bytes=len(data),
        truncated=truncated,
        next_line_bytes=next_line_bytes,
    )


def _existing_content(dir_fd: int, name: str, display: str) -> tuple[bytes | None, int | None]:
    try:
        fd = os.open(
            name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink after we resolved it
            raise ToolFailure(
                "invalid", f"{display} changed during the call", path=display
            ) from None
        raise ToolFailure("permission_denied", f"cannot read {display}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ToolFailure("invalid", f"not a regular file: {display}", path=display)
    return _read_all(fd), stat.S_IMODE(info.st_mode)


def _atomic_replace(
    dir_fd: int,
    name: str,
    content: bytes,
    mode: int,
    owner: tuple[int, int] | None,
    commit: Callable[[], None],
) -> None:
    temp = f".{name[:200]}.{secrets.token_hex(6)}.perdure-tmp"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            if owner is not None:
                os.fchown(fd, *owner)
            os.fchmod(fd, mode)  # the umask may have narrowed it
            os.fsync(fd)
        finally:
            os.close(fd)
        commit()
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_file(
    conf: Confinement,
    args: WriteArgs,
    *,
    owner: tuple[int, int] | None,
    before_commit: BeforeCommit,
) -> WriteOutput:
    """Replace (or create) a file atomically, creating parent directories."""
    content = args.content.encode("utf-8")
    try:
        with conf.parent_of(args.path, create=True, owner=owner) as (dir_fd, name):
            old, old_mode = _existing_content(dir_fd, name, args.path)
            result = WriteOutput(path=args.path, bytes_written=len(content), sha256=_sha(content))
            pre = None if old is None else _sha(old)
            _atomic_replace(
                dir_fd,
                name,
                content,
                0o644 if old_mode is None else old_mode,
                owner,
                lambda: before_commit(pre, result.sha256, result),
            )
            return result
    except OSError as exc:
        raise ToolFailure(
            "permission_denied", f"cannot write {args.path}: {exc.strerror}"
        ) from None


def edit_file(
    conf: Confinement,
    args: EditArgs,
    *,
    owner: tuple[int, int] | None,
    before_commit: BeforeCommit,
) -> EditOutput:
    """Apply exact replacements to an existing UTF-8 file atomically, all or nothing."""
    try:
        with conf.parent_of(args.path, create=False) as (dir_fd, name):
            old, old_mode = _existing_content(dir_fd, name, args.path)
            if old is None or old_mode is None:
                raise ToolFailure("not_found", f"no such file: {args.path}", path=args.path)
            try:
                text = old.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolFailure(
                    "invalid", f"{args.path} is not UTF-8 text", path=args.path
                ) from None
            outcome = apply_edits(text, args.edits, args.path)
            content = outcome.content.encode("utf-8")
            result = EditOutput(
                path=args.path,
                replacements=len(args.edits),
                first_changed_line=outcome.first_changed_line,
                diff=outcome.diff,
                sha256=_sha(content),
            )
            pre = _sha(old)
            _atomic_replace(
                dir_fd,
                name,
                content,
                old_mode,
                owner,
                lambda: before_commit(pre, result.sha256, result),
            )
            return result
    except OSError as exc:
        raise ToolFailure("permission_denied", f"cannot edit {args.path}: {exc.strerror}") from None


def file_sha256(conf: Confinement, path: str) -> str | None:
    """Hash of the file's current content, or ``None`` when it is missing or unreadable."""
    try:
        with conf.parent_of(path, create=False) as (dir_fd, name):
            content, _ = _existing_content(dir_fd, name, path)
            return None if content is None else _sha(content)
    except (ToolFailure, Rejected, OSError):
        return None


def _entry_kind(info: os.stat_result) -> Literal["file", "dir", "symlink", "other"]:
    if stat.S_ISLNK(info.st_mode):
        return "symlink"
    if stat.S_ISDIR(info.st_mode):
        return "dir"
    if stat.S_ISREG(info.st_mode):
        return "file"
    return "other"


def list_dir(conf: Confinement, args: LsArgs) -> LsOutput:
    """Entries of one directory sorted case-insensitively, dotfiles included."""
    fd = conf.open_dir(args.path)
    try:
        entries: list[LsEntryModel] = []
        with os.scandir(fd) as listing:
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue  # vanished while listing
                kind = _entry_kind(info)
                entries.append(
                    LsEntryModel(
                        name=item.name,
                        kind=kind,
                        size=info.st_size if kind == "file" else 0,
                    )
                )
    finally:
        os.close(fd)
    entries.sort(key=lambda entry: (entry.name.lower(), entry.name))
    return LsOutput(entries=entries[: args.limit], truncated=len(entries) > args.limit)
