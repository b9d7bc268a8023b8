"""One directory per workspace (actor) under the server root."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from remote_env.server.errors import Rejected
from remote_env.server.paths import Confinement, openat2_available
from remote_env.server.settings import ServerSettings
from remote_env.server.users import CommandUser, command_user
from remote_env.workspace_names import is_workspace_name

__all__ = ["Workspaces"]


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
            pass
        # O_NOFOLLOW: a workspace directory replaced by a symlink is refused, not followed.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            yield Confinement(fd, path, use_openat2=self.use_openat2)
        finally:
            os.close(fd)
