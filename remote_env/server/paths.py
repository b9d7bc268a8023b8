"""Path confinement: open files strictly beneath a workspace directory.

Checking a path and then opening it is racy (a symlink swapped in between wins), so every
open here resolves the path *relative to a directory fd of the workspace* with the kernel's
help:

* ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`` (Linux >= 5.6), which fails
  with ``EXDEV`` for any step outside the workspace: ``..`` above the root, absolute paths and
  absolute symlinks (even ones that point inside), and ``/proc`` magic links;
* elsewhere, a component-by-component walk that opens each directory with ``O_NOFOLLOW``
  relative to the previous fd, expands relative symlinks itself and tracks ``..`` on a stack of
  fds, with the same refusals.

Both yield an fd; everything after that (read, write into a directory fd, rename within it)
works on fds, so a later swap cannot redirect the operation.
"""

from __future__ import annotations

import ctypes
import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from remote_env.server.errors import Rejected, ToolFailure, outside_workspace

__all__ = [
    "Confinement",
    "lexical_relative",
    "openat2_available",
]

_SYS_OPENAT2 = 437  # same number on every Linux architecture (unified syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_BENEATH = 0x08
_MAX_SYMLINKS = 40
_EAGAIN_RETRIES = 64


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.syscall.restype = ctypes.c_long
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _libc = None


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    if _libc is None:  # pragma: no cover
        raise OSError(errno.ENOSYS, "openat2 unavailable")
    # mode must be 0 unless O_CREAT is given, or the kernel answers EINVAL.
    how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
    encoded = os.fsencode(path)
    for _ in range(_EAGAIN_RETRIES):
        fd = int(
            _libc.syscall(
                _SYS_OPENAT2,
                dir_fd,
                ctypes.c_char_p(encoded),
                ctypes.byref(how),
                ctypes.sizeof(how),
            )
        )
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        # RESOLVE_BENEATH answers EAGAIN when a concurrent rename might allow an escape.
        if err != errno.EAGAIN:
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def openat2_available(probe_dir: str) -> bool:
    """True when ``openat2`` with ``RESOLVE_BENEATH`` works on this kernel (and seccomp)."""
    try:
        dir_fd = os.open(probe_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fd = _openat2(dir_fd, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    else:
        os.close(fd)
        return True
    finally:
        os.close(dir_fd)


def lexical_relative(path: str, workspace_root: str) -> str:
    """Turn a request path into a workspace-relative one, refusing obvious escapes.

    An absolute path must lie under ``workspace_root`` (lexically). ``..`` may not climb above
    the root at any point. The result keeps ``..`` and symlinks for the kernel to resolve;
    this check only gives early, clean refusals before anything is recorded.

    Raises:
        Rejected: 403 ``outside_workspace``.
    """
    if path.startswith("/"):
        root = workspace_root.rstrip("/")
        if path == root:
            path = "."
        elif path.startswith(root + "/"):
            path = path[len(root) + 1 :]
        else:
            raise outside_workspace(path)
    depth = 0
    for part in path.split("/"):
        if part in ("", "."):
            continue
        depth = depth - 1 if part == ".." else depth + 1
        if depth < 0:
            raise outside_workspace(path)
    return path or "."


def _failure(exc: OSError, display: str) -> ToolFailure | Rejected:
    code = exc.errno
    if code == errno.EXDEV:
        return outside_workspace(display)
    if code == errno.ENOENT:
        return ToolFailure("not_found", f"no such file or directory: {display}", path=display)
    if code == errno.ENOTDIR:
        return ToolFailure("not_directory", f"not a directory: {display}", path=display)
    if code == errno.EISDIR:
        return ToolFailure("is_directory", f"is a directory: {display}", path=display)
    if code in (errno.EACCES, errno.EPERM):
        return ToolFailure("permission_denied", f"permission denied: {display}", path=display)
    if code == errno.ELOOP:
        return ToolFailure("invalid", f"too many levels of symbolic links: {display}", path=display)
    return ToolFailure("invalid", f"{os.strerror(code or 0)}: {display}", path=display)


class Confinement:
    """Opens paths beneath one workspace directory fd.

    Attributes:
        root_fd: an ``O_DIRECTORY`` fd of the workspace (owned by the caller).
        root_path: the workspace's absolute real path (for absolute request paths).
        use_openat2: which resolver to use.
    """

    def __init__(self, root_fd: int, root_path: str, *, use_openat2: bool) -> None:
        self.root_fd = root_fd
        self.root_path = root_path
        self.use_openat2 = use_openat2

    # -- resolution ---------------------------------------------------------------------

    def resolve(self, path: str, flags: int, *, display: str | None = None) -> int:
        """Open ``path`` (workspace-relative or absolute inside) with ``flags``; return the fd.

        Symlinks are followed only while they stay beneath the workspace.

        Raises:
            Rejected: 403 when the path escapes.
            ToolFailure: the OS refused (not found, not a directory, ...).
        """
        shown = display if display is not None else path
        rel = lexical_relative(path, self.root_path)
        flags |= os.O_CLOEXEC
        try:
            if self.use_openat2:
                return _openat2(self.root_fd, rel, flags)
            return self._walk(rel, flags, shown)
        except OSError as exc:
            raise _failure(exc, shown) from None

    def _walk(self, rel: str, flags: int, shown: str) -> int:
        # Portable resolver: never lets the kernel follow a symlink; each directory is opened
        # O_NOFOLLOW relative to the fd of its parent, and ".." pops our own fd stack, so a
        # component swapped for a symlink mid-walk makes the open fail instead of escaping.
        stack = [os.dup(self.root_fd)]
        pending = [part for part in reversed(rel.split("/")) if part not in ("", ".")]
        links = 0
        try:
            while pending:
                name = pending.pop()
                if name == "..":
                    if len(stack) == 1:
                        raise outside_workspace(shown)
                    os.close(stack.pop())
                    continue
                last = not pending
                want = flags if last else os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
                try:
                    fd = os.open(name, want | os.O_NOFOLLOW, dir_fd=stack[-1])
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise
                    try:
                        target = os.readlink(name, dir_fd=stack[-1])
                    except OSError as link_exc:
                        if link_exc.errno == errno.EINVAL:  # not a symlink after all
                            raise exc from None
                        raise
                    links += 1
                    if links > _MAX_SYMLINKS:
                        raise OSError(errno.ELOOP, "too many symlinks", shown) from None
                    if target.startswith("/"):
                        raise outside_workspace(shown) from None
                    pending.extend(
                        part for part in reversed(target.split("/")) if part not in ("", ".")
                    )
                    continue
                if last:
                    return fd
                stack.append(fd)
            # The path named the root itself or ended in "..": open the current directory.
            return os.open(".", flags, dir_fd=stack[-1])
        finally:
            for fd in stack:
                os.close(fd)

    # -- helpers used by file operations ------------------------------------------------

    def open_dir(self, path: str) -> int:
        """Open a directory beneath the workspace for reading."""
        return self.resolve(path, os.O_RDONLY | os.O_DIRECTORY)

    def open_regular(self, path: str) -> tuple[int, os.stat_result]:
        """Open an existing regular file for reading; return the fd and its ``fstat``.

        ``O_NONBLOCK`` keeps a FIFO planted in the workspace from hanging the server.
        """
        fd = self.resolve(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolFailure("is_directory", f"is a directory: {path}", path=path)
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailure("invalid", f"not a regular file: {path}", path=path)
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    def ensure_dir(self, path: str, *, owner: tuple[int, int] | None = None) -> int:
        """Open directory ``path``, creating missing components first (like ``mkdir -p``).

        Each missing component is created with ``mkdirat`` inside an fd of its (confined)
        parent, so creation cannot land outside either.
        """
        try:
            return self.open_dir(path)
        except ToolFailure as exc:
            if exc.code != "not_found":
                raise
        parts = [part for part in path.split("/") if part not in ("", ".")]
        for index in range(1, len(parts) + 1):
            prefix = "/".join(parts[:index])
            try:
                os.close(self.open_dir(prefix))
                continue
            except ToolFailure as exc:
                if exc.code != "not_found":
                    raise
            parent_fd = self.open_dir("/".join(parts[: index - 1]) or ".")
            try:
                os.mkdir(parts[index - 1], 0o755, dir_fd=parent_fd)
                if owner is not None:
                    os.chown(parts[index - 1], *owner, dir_fd=parent_fd, follow_symlinks=False)
            except FileExistsError:
                pass  # created concurrently; the next open decides whether it is usable
            except OSError as exc:
                raise _failure(exc, path) from None
            finally:
                os.close(parent_fd)
        return self.open_dir(path)

    @contextmanager
    def parent_of(
        self, path: str, *, create: bool, owner: tuple[int, int] | None = None
    ) -> Iterator[tuple[int, str]]:
        """Yield ``(dir_fd, name)`` for the file ``path`` names, following a final symlink.

        A final symlink is resolved (beneath the workspace) so writing through an inside link
        updates its target, as a normal write would; an absolute or escaping link is refused.
        The caller creates or replaces ``name`` inside ``dir_fd`` only, with ``O_NOFOLLOW`` or
        ``rename``, neither of which follows a symlink swapped in afterwards.

        Raises:
            Rejected, ToolFailure.
        """
        current = lexical_relative(path, self.root_path)
        for _ in range(_MAX_SYMLINKS):
            parent, name = posixpath.split(current.rstrip("/") if current != "/" else current)
            if name in ("", ".", ".."):
                raise ToolFailure("is_directory", f"not a file path: {path}", path=path)
            parent = parent or "."
            dir_fd = self.ensure_dir(parent, owner=owner) if create else self.open_dir(parent)
            try:
                try:
                    info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                except OSError as exc:
                    raise _failure(exc, path) from None
                if info is not None and stat.S_ISLNK(info.st_mode):
                    target = os.readlink(name, dir_fd=dir_fd)
                    if target.startswith("/"):
                        raise outside_workspace(path)
                    current = posixpath.join(parent, target)
                    # Re-run the lexical check on the combined path before resolving it.
                    lexical_relative(current, self.root_path)
                    continue
                if info is not None and stat.S_ISDIR(info.st_mode):
                    raise ToolFailure("is_directory", f"is a directory: {path}", path=path)
                yield dir_fd, name
                return
            finally:
                os.close(dir_fd)
        raise ToolFailure("invalid", f"too many levels of symbolic links: {path}", path=path)
