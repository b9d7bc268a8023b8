"""Confining shell commands: bubblewrap namespaces and mounts, resource limits, a pids cgroup.

Each ``bash`` op runs as ``bwrap <options> -- <shell> -c <gate> <shell> <command>``:

* **Mounts**: a fresh, read-only root holding only the system directories (``/usr`` and the
  ``/bin``-style links or directories, read-only), a minimal ``/etc`` (the few files programs
  need to resolve users, hosts, libraries and certificates; never ``shadow``), private
  ``/proc``, ``/dev`` and ``/tmp``, and the command's own workspace bound read-write at its
  real path (so paths from ``/v1/info`` work inside). Other workspaces, the server root, the
  op log, the output logs and the token secret are not mounted: they do not exist inside.
  A write outside the workspace fails (read-only root) or lands in the private ``/tmp``,
  which vanishes with the command.
* **Namespaces**: new pid, ipc, uts and (where possible) cgroup namespaces; a new network
  namespace (loopback only) unless the operator allows networking. ``--die-with-parent``
  kills the command when its ``bwrap`` dies, and with a pid namespace every process the
  command started dies with it: killing the process group kills everything.
* **Capabilities**: all dropped, so even a command running as root cannot remount, trace
  other processes or override file permissions.
* **Limits**: ``RLIMIT_AS`` (address space, against memory hogs), ``RLIMIT_NPROC`` and, where
  a writable cgroup-v1 ``pids`` hierarchy exists, a per-command ``pids.max`` (against fork
  bombs: the kernel exempts root from ``RLIMIT_NPROC``, not from a pids cgroup), and no core
  files.

``bwrap`` keeps the process group the server gave it (no ``--new-session``), so the op log's
gating and group-kill semantics (see :mod:`remote_env.server.executor`) are unchanged; a
command's exit status is ``bwrap``'s, which reports a signal-killed command as
``128 + signal``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import resource
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from remote_env.server.settings import ServerSettings

__all__ = [
    "Jail",
    "PidsCgroup",
    "bwrap_argv",
    "find_bwrap",
    "open_jail",
    "probe_bwrap",
    "resource_limiter",
]

_BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs commonly read from /etc: users and groups (no passwords), name resolution,
# the dynamic linker, certificates, alternatives' links, locale and shell start-up files.
_ETC_ENTRIES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "host.conf",
    "resolv.conf",
    "gai.conf",
    "services",
    "protocols",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "locale.alias",
    "mime.types",
    "magic",
    "bash.bashrc",
    "profile",
    "profile.d",
    "inputrc",
    "environment",
    "gitconfig",
    "terminfo",
)
_CGROUP_V1_PIDS = Path("/sys/fs/cgroup/pids")


def find_bwrap() -> str | None:
    """The ``bwrap`` executable on the system path, if installed."""
    return shutil.which("bwrap", path=_BASE_PATH)


@dataclass(frozen=True, slots=True)
class Jail:
    """How commands are confined (built from the server settings at start).

    Attributes:
        bwrap: the ``bwrap`` executable; ``None`` runs commands unconfined (only when the
            operator asked for it).
        allow_network: share the host's network namespace.
        max_processes: processes (and threads) one command may have at once.
        max_memory_bytes: address space of each process of a command; ``0``: unlimited.
        pids: the per-command pids cgroup parent, when the host offers one.
    """

    bwrap: str | None
    allow_network: bool
    max_processes: int
    max_memory_bytes: int
    pids: PidsCgroup | None = None


async def open_jail(settings: ServerSettings, scratch: Path) -> tuple[Jail, str | None]:
    """The jail the settings ask for, and why ``bash`` must be refused (``None``: it may run).

    Without ``unconfined``, commands only run if ``bwrap`` is installed and works here (it
    is tried once, as the command user, on ``scratch``: the server root, whose workspaces
    that user must be able to reach).
    """
    pids = PidsCgroup.open()
    if pids is not None:
        await asyncio.to_thread(pids.sweep)
    open_jail = Jail(None, True, settings.max_processes, settings.max_memory_bytes, pids)
    if settings.unconfined:
        return open_jail, None
    bwrap = shutil.which(settings.bwrap) if settings.bwrap else find_bwrap()
    if bwrap is None:
        return open_jail, (
            "bash is disabled: bubblewrap (bwrap) is not installed on the sandbox host; "
            "install it (Debian: apt-get install bubblewrap), or start the server with "
            "--unconfined to run commands without confinement"
        )
    problem = await probe_bwrap(
        bwrap,
        scratch,
        allow_network=settings.allow_network,
        user=settings.run_as_user,
        group=settings.run_as_group,
    )
    if problem is not None:
        hint = (
            f" (the user {settings.run_as_user} must be able to reach {scratch})"
            if settings.run_as_user is not None
            else ""
        )
        return open_jail, f"bash is disabled: commands cannot be confined: {problem}{hint}"
    jail = Jail(
        bwrap, settings.allow_network, settings.max_processes, settings.max_memory_bytes, pids
    )
    return jail, None


def bwrap_argv(
    bwrap: str,
    *,
    workspace: str,
    cwd: str,
    allow_network: bool,
    workspace_fd: int | None = None,
) -> list[str]:
    """``bwrap`` and its options, up to and including ``--``, for one command.

    With ``workspace_fd`` (an open ``O_PATH`` descriptor of the workspace, inherited by
    ``bwrap``) the workspace is mounted from it: a command user who may not traverse the
    server root's parents still gets its workspace, and a path swapped after the server
    checked it cannot redirect the mount.
    """
    argv = [
        bwrap,
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--cap-drop",
        "ALL",
    ]
    if not allow_network:
        argv.append("--unshare-net")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for name in _ETC_ENTRIES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    if workspace_fd is None:
        argv += ["--bind", workspace, workspace]
    else:
        argv += ["--bind-fd", str(workspace_fd), workspace]
    argv += ["--remount-ro", "/", "--chdir", cwd, "--"]
    return argv


async def probe_bwrap(
    bwrap: str,
    scratch: Path,
    *,
    allow_network: bool,
    user: str | None = None,
    group: str | None = None,
) -> str | None:
    """Run ``true`` the way commands run (as ``user``, with ``scratch`` standing in for a
    workspace); ``None`` if it works, else why not."""
    where = await asyncio.to_thread(os.path.realpath, scratch)
    fd = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    argv = bwrap_argv(
        bwrap, workspace=where, cwd=where, allow_network=allow_network, workspace_fd=fd
    )
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            "true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(fd,),
            user=user,
            group=group,
            extra_groups=[] if user is not None else None,
        )
        _, err = await asyncio.wait_for(process.communicate(), 30)
    except (OSError, ValueError, KeyError, TimeoutError) as exc:
        return f"{bwrap} cannot run: {exc}"
    finally:
        os.close(fd)
    if process.returncode != 0:
        return f"{bwrap} fails here: {err.decode(errors='replace').strip()}"
    return None


def resource_limiter(jail: Jail, cgroup: Path | None) -> Callable[[], None]:
    """A ``preexec_fn`` (run in the forked child, after it changed user): join ``cgroup``
    first, so ``bwrap`` and everything it starts are counted, then apply the limits."""
    procs = None if cgroup is None else str(cgroup / "cgroup.procs")

    def limit() -> None:
        if procs is not None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (jail.max_processes, jail.max_processes))
        if jail.max_memory_bytes > 0:
            cap = jail.max_memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return limit


class PidsCgroup:
    """Per-command ``pids`` cgroups (v1) under ``<hierarchy>/perdure-sandbox``.

    A command's process joins its cgroup between fork and exec (see :func:`resource_limiter`),
    so every process it ever starts is counted. Its cgroup is removed when it is over (a pid
    namespace guarantees no member outlives it for long).
    """

    def __init__(self, parent: Path) -> None:
        self.parent = parent

    @classmethod
    def open(cls, hierarchy: Path = _CGROUP_V1_PIDS) -> PidsCgroup | None:
        """The parent cgroup, created if needed; ``None`` if the host has no writable one."""
        parent = hierarchy / "perdure-sandbox"
        try:
            parent.mkdir(exist_ok=True)
            (parent / "pids.max").read_text()
        except OSError:
            return None
        return cls(parent)

    def _path(self, key: str) -> Path:
        return self.parent / hashlib.sha256(key.encode()).hexdigest()[:32]

    def create(self, key: str, max_processes: int, owner: tuple[int, int] | None) -> Path:
        """A fresh cgroup for one command, limited to ``max_processes``; ``owner`` (the user
        commands run as) may move itself into it."""
        path = self._path(key)
        path.mkdir(exist_ok=True)
        (path / "pids.max").write_text(str(max_processes))
        if owner is not None:
            os.chown(path / "cgroup.procs", *owner)
        return path

    async def remove(self, key: str) -> None:
        """Remove a command's cgroup once its last member is gone (best effort)."""
        path = self._path(key)
        for _ in range(50):
            try:
                path.rmdir()
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.02)  # members of a killed namespace are still exiting
            else:
                return

    def sweep(self) -> None:
        """Remove the empty cgroups a previous server process left behind."""
        for child in self.parent.iterdir():
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
