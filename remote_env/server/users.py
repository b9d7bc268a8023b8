"""Who commands run as.

A command that runs as uid 0 is dangerous even inside bubblewrap with every capability
dropped: the kernel checks ``/proc/sys`` writes against the file's owner (root), not a
capability, so root without capabilities can still set host sysctls; and a user namespace
mapping the command's uid to the host's root changes nothing about that (the check uses
the host uid). So a server running as root gives commands an unprivileged host uid:
the operator's ``--run-as-user``, else ``nobody``. ``--run-as-root`` is the explicit opt-out.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass

from remote_env.server.settings import ServerSettings

__all__ = ["DEFAULT_USER", "CommandUser", "command_user", "setpriv_argv"]

DEFAULT_USER = "nobody"
# nobody's uid and gid on Debian and most distributions, for a host whose passwd lacks it.
_NOBODY_ID = 65534


@dataclass(frozen=True, slots=True)
class CommandUser:
    """A host user commands run as (the server, root, switches to it before ``bwrap``).

    Attributes:
        name: the user's name (``USER`` and ``LOGNAME`` in the command's environment).
        uid: its host uid; never 0.
        gid: its host gid (supplementary groups are cleared).
    """

    name: str
    uid: int
    gid: int

    @property
    def owner(self) -> tuple[int, int]:
        """``(uid, gid)``: who workspace directories and files written through the API
        belong to, so commands can change them."""
        return self.uid, self.gid


def command_user(settings: ServerSettings, euid: int | None = None) -> CommandUser | None:
    """The user commands run as; ``None``: the server's own user (a server not running as
    root, or one told ``run_as_root``).

    Raises:
        KeyError: ``run_as_user`` or ``run_as_group`` names no such user or group.
        ValueError: ``run_as_user`` is root (use ``run_as_root`` to say so).
    """
    if euid is None:
        euid = os.geteuid()
    if settings.run_as_user is not None:
        entry = pwd.getpwnam(settings.run_as_user)
        gid = (
            grp.getgrnam(settings.run_as_group).gr_gid
            if settings.run_as_group is not None
            else entry.pw_gid
        )
        if entry.pw_uid == 0:
            raise ValueError("--run-as-user names root: pass --run-as-root to mean it")
        return CommandUser(entry.pw_name, entry.pw_uid, gid)
    if euid != 0 or settings.run_as_root:
        return None
    try:
        entry = pwd.getpwnam(DEFAULT_USER)
    except KeyError:
        return CommandUser(DEFAULT_USER, _NOBODY_ID, _NOBODY_ID)
    return CommandUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def setpriv_argv(setpriv: str, user: CommandUser) -> list[str]:
    """``setpriv`` (util-linux) and its options, ``--`` included: become ``user`` with no
    supplementary groups, no capabilities of any kind (inheritable and bounding included:
    nothing executed later can regain one) and ``no_new_privs`` (setuid binaries do not
    elevate), then execute what follows."""
    return [
        setpriv,
        f"--reuid={user.uid}",
        f"--regid={user.gid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
        "--",
    ]
