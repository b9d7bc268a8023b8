"""One directory per workspace (actor) under the server root."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from remote_env.server.errors import Rejected
from remote_env.server.paths import Confinement, openat2_available
from remote_env.server.settings import ServerSettings
from remote_env.server.users import CommandUser, command_user
from remote_env.workspace_names import is_workspace_name

__all__ = ["Workspaces", "hand_over"]


class Workspaces:
    """Creates workspace directories on first use and hands out confined views of them.

    Attributes:
        root: the real path of the server root.
        user: who commands run as when the server drops privileges (see
            :func:`~remote_env.server.users.command_user`), else ``None``.
        owner: ``(uid, gid)`` of that user: workspace directories and files written
            through the API are given to it.
        use_openat2: whether confinement uses ``openat2`` or the portable walk.
    """

    def __init__(self, settings: ServerSettings) -> None:
        settings.root.mkdir(parents=True, exist_ok=True)
        self.root = os.path.realpath(settings.root)
        self.user: CommandUser | None = command_user(settings)
        self.owner: tuple[int, int] | None = None if self.user is None else self.user.owner
        probe = openat2_available(self.root)
        self.use_openat2 = probe if settings.use_openat2 is None else settings.use_openat2 and probe

    def path_of(self, workspace: str) -> str:
        """Absolute path of a workspace directory."""
        if not is_workspace_name(workspace):
            raise Rejected(400, "invalid", f"invalid workspace name {workspace!r}")
        return os.path.join(self.root, workspace)

    @contextmanager
    def open(self, workspace: str) -> Iterator[Confinement]:
        """Yield a :class:`Confinement` for ``workspace``, creating its directory if needed."""
        path = self.path_of(workspace)
        try:
            os.mkdir(path, 0o755)
            if self.owner is not None:
                os.chown(path, *self.owner, follow_symlinks=False)
        except FileExistsError:
            if self.owner is not None:
                hand_over(path, self.owner)
        # O_NOFOLLOW: a workspace directory replaced by a symlink is refused, not followed.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            yield Confinement(fd, path, use_openat2=self.use_openat2)
        finally:
            os.close(fd)


def hand_over(path: str, owner: tuple[int, int]) -> None:
    """Give a workspace made for another command user to ``owner``, once.

    A workspace written while commands ran as root (before commands dropped to ``nobody``
    by default, or under ``--run-as-root``) holds root's files, which the new command user
    could not change. The tree is walked through directory descriptors without following
    a symlink (``fwalk``), children before their directory, so a directory is still out of
    the new owner's hands while its entries are changed; symlinks are changed themselves,
    and a file with other hard links is left alone (it may be a name for a file outside).
    The workspace directory goes last: it marks the hand-over done.
    """
    info = os.lstat(path)
    if (info.st_uid, info.st_gid) == owner or not stat.S_ISDIR(info.st_mode):
        return
    for _, dirs, files, dir_fd in os.fwalk(path, topdown=False, follow_symlinks=False):
        for name in (*files, *dirs):
            try:
                entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISREG(entry.st_mode) and entry.st_nlink > 1:
                    continue
                os.chown(name, *owner, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed meanwhile
    os.chown(path, *owner, follow_symlinks=False)
