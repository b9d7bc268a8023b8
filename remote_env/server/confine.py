"""Confining shell commands: bubblewrap namespaces and mounts, resource limits, a pids cgroup.

Each ``bash`` op runs as ``bwrap <options> -- [setpriv <drop> --] <shell> -c <gate> <shell>
<command>``:

* **Mounts**: a fresh, read-only root holding only the system directories (``/usr`` and the
  ``/bin``-style links or directories, read-only), a minimal ``/etc`` (the few files programs
  need to resolve users, hosts, libraries and certificates; never ``shadow``), private
  ``/proc``, ``/dev`` and ``/tmp``, and the command's own workspace bound read-write at its
  real path (so paths from ``/v1/info`` work inside). Other workspaces, the server root, the
  op log, the output logs and the token secret are not mounted: they do not exist inside.
  A write outside the workspace fails (read-only root) or lands in the private ``/tmp``,
  which vanishes with the command. No kernel state is writable: ``/proc/sys``,
  ``/proc/sysrq-trigger``, ``/proc/irq`` and ``/proc/bus`` are bound read-only over the
  private ``/proc`` (bwrap covers the last three itself only when it can test them, and
  never ``/proc/sys``), and ``/sys`` is not mounted.
* **Namespaces**: new pid, ipc, uts and (where possible) cgroup namespaces; a new network
  namespace (loopback only) unless the operator allows networking. ``--die-with-parent``
  kills the command when its ``bwrap`` dies, and with a pid namespace every process the
  command started dies with it: killing the process group kills everything.
* **User**: a server running as root never runs commands as root unless told to
  (``--run-as-root``): ``bwrap`` itself runs as root (it can then mount a workspace whose
  parents the command user may not search), keeps only ``CAP_SETUID``, ``CAP_SETGID`` and
  ``CAP_SETPCAP``, and starts ``setpriv`` (util-linux), which drops to the command user
  (:func:`remote_env.server.users.command_user`: ``--run-as-user``, else ``nobody``),
  clears the supplementary groups, the inheritable capabilities and the bounding set,
  sets ``no_new_privs`` and only then executes the shell. With ``--run-as-root`` the
  command runs as root in a user namespace of its own (``--unshare-user``; uid 0 there is
  the host's root), where bwrap empties the bounding set (run as root without a user
  namespace, it leaves it full). A server not running as root runs ``bwrap`` as itself
  (bwrap then needs unprivileged user namespaces).
* **Capabilities**: none (effective, permitted, inheritable, ambient, bounding), so even a
  command running as root cannot remount, trace other processes or override file
  permissions, nor regain capabilities by executing anything.
* **Limits**: ``RLIMIT_AS`` (address space, against memory hogs), ``RLIMIT_CPU`` (CPU
  seconds per process, against spinners that outlive no timeout because they fork anew),
  ``RLIMIT_NPROC`` and, where writable cgroup-v1 hierarchies exist, a per-command
  ``pids.max`` (against fork bombs: the kernel exempts root from ``RLIMIT_NPROC``, not from a
  pids cgroup) and ``memory.limit_in_bytes`` (the command's processes *together*: a hog split
  over many processes each under ``RLIMIT_AS`` is still stopped), and no core files.

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
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from remote_env.bwrap import locate_bwrap, missing_bwrap
from remote_env.server.settings import ServerSettings
from remote_env.server.users import CommandUser, command_user, setpriv_argv

__all__ = [
    "CommandCgroup",
    "Jail",
    "bwrap_argv",
    "check_confinement",
    "open_jail",
    "probe_bwrap",
    "resource_limiter",
]

_BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Kernel interfaces under the private /proc that must stay read-only: sysctls (writable to a
# uid that is root on the host even without capabilities), the magic SysRq trigger, IRQ
# affinities and bus (PCI, USB) settings.
_PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
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
_CGROUP_V1 = Path("/sys/fs/cgroup")
_SWEEP_MIN_AGE_S = 60.0


@dataclass(frozen=True, slots=True)
class Jail:
    """How commands are confined (built from the server settings at start).

    Attributes:
        bwrap: the ``bwrap`` executable; ``None`` runs commands unconfined (only when the
            operator asked for it).
        allow_network: share the host's network namespace.
        max_processes: processes (and threads) one command may have at once.
        max_memory_bytes: address space of each process of a command, and the memory of
            all of them together where a memory cgroup exists; ``0``: unlimited.
        pids: the per-command pids cgroup parent, when the host offers one.
        memory: the per-command memory cgroup parent, when the host offers one.
        max_cpu_seconds: CPU time of each process of a command; ``0``: unlimited.
        setpriv: the ``setpriv`` executable that drops commands to their user inside the
            jail, when the server runs as root and commands do not.
    """

    bwrap: str | None
    allow_network: bool
    max_processes: int
    max_memory_bytes: int
    pids: CommandCgroup | None = None
    memory: CommandCgroup | None = None
    max_cpu_seconds: int = 0
    setpriv: str | None = None

    def cgroups(self) -> list[tuple[CommandCgroup, int]]:
        """The per-command cgroups to create, each with its limit."""
        chosen = []
        if self.pids is not None:
            chosen.append((self.pids, self.max_processes))
        if self.memory is not None and self.max_memory_bytes > 0:
            chosen.append((self.memory, self.max_memory_bytes))
        return chosen


async def open_jail(settings: ServerSettings, scratch: Path) -> tuple[Jail, str | None]:
    """The jail the settings ask for, and why ``bash`` must be refused (``None``: it may run).

    Without ``unconfined``, commands only run if a ``bwrap`` is found
    (:func:`remote_env.bwrap.locate_bwrap`) and works here: see :func:`check_confinement`.
    """
    pids = CommandCgroup.open("pids", "pids.max")
    memory = CommandCgroup.open("memory", "memory.limit_in_bytes")
    for made in (pids, memory):
        if made is not None:
            await asyncio.to_thread(made.sweep)

    def jail(bwrap: str | None, allow_network: bool, setpriv: str | None = None) -> Jail:
        return Jail(
            bwrap,
            allow_network,
            settings.max_processes,
            settings.max_memory_bytes,
            pids=pids,
            memory=memory,
            max_cpu_seconds=settings.max_cpu_seconds,
            setpriv=setpriv,
        )

    open_jail = jail(None, True)
    if settings.unconfined:
        return open_jail, None
    found, problem = await check_confinement(settings, scratch)
    if found is None:
        return open_jail, f"bash is disabled: {problem}"
    bwrap, setpriv = found
    return jail(bwrap, settings.allow_network, setpriv), None


async def check_confinement(
    settings: ServerSettings, scratch: Path
) -> tuple[tuple[str, str | None] | None, str]:
    """Find ``bwrap`` (and ``setpriv`` when commands drop to another user) and try them
    once as commands will run, with ``scratch`` (the server root) standing in for a
    workspace: ``((bwrap, setpriv), "")``, or ``(None, what to fix)`` in one line.

    Raises:
        KeyError, ValueError: from :func:`~remote_env.server.users.command_user`.
    """
    bwrap = locate_bwrap(settings.bwrap)
    if bwrap is None:
        return None, missing_bwrap(settings.bwrap)
    user = command_user(settings)
    setpriv = None
    if user is not None:
        setpriv = shutil.which("setpriv", path=_BASE_PATH)
        if setpriv is None:
            return None, (
                f"commands run as {user.name}, which needs setpriv (Debian: apt-get install "
                "util-linux); or pass --run-as-root to run them as root without capabilities"
            )
    problem = await probe_bwrap(
        bwrap, scratch, allow_network=settings.allow_network, user=user, setpriv=setpriv
    )
    if problem is not None:
        return None, f"commands cannot be confined: {problem}"
    return (bwrap, setpriv), ""


def bwrap_argv(
    bwrap: str,
    *,
    workspace: str,
    cwd: str,
    allow_network: bool,
    workspace_fd: int | None = None,
    user: CommandUser | None = None,
    setpriv: str | None = None,
) -> list[str]:
    """The command line up to the shell, ``--`` included, for one command.

    With ``workspace_fd`` (an open ``O_PATH`` descriptor of the workspace, inherited by
    ``bwrap``) the workspace is mounted from it: a path swapped after the server checked it
    cannot redirect the mount. With ``user`` (``bwrap`` runs as root), ``setpriv`` drops
    the command to that user inside the jail; without, a ``bwrap`` running as root gives
    the command a user namespace of its own, the only place bwrap empties the bounding set.
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
    if user is not None:
        # What setpriv needs to change user and empty the bounding set; it drops them all.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    elif os.geteuid() == 0:
        argv.append("--unshare-user")
    if not allow_network:
        argv.append("--unshare-net")
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    # (Made before its entries: bwrap creates a file's missing parent 0700, out of the
    # command user's reach.)
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in _ETC_ENTRIES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    argv += ["--proc", "/proc"]
    # Bound from the host's /proc: what /proc/sys shows depends on the reader's namespaces
    # (its network namespace's sysctls, say), not on which proc mount it is read through.
    for path in _PROC_READ_ONLY:
        argv += ["--ro-bind-try", path, path]
    argv += ["--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/var/tmp"]
    # bwrap gives the directories it creates for a mount point the host's modes: a 0700
    # parent (a root-only temporary directory, /root) would leave a command user unable
    # to reach its own workspace by path ($HOME). Created first, they are plain 0755.
    parents = Path(workspace).parents
    for parent in reversed(parents[:-1]):  # [-1] is "/"
        argv += ["--perms", "0755", "--dir", str(parent)]
    if workspace_fd is None:
        argv += ["--bind", workspace, workspace]
    else:
        argv += ["--bind-fd", str(workspace_fd), workspace]
    argv += ["--remount-ro", "/", "--chdir", cwd, "--"]
    if user is not None:
        if setpriv is None:
            raise ValueError("dropping to a command user needs setpriv")
        argv += setpriv_argv(setpriv, user)
    return argv


async def probe_bwrap(
    bwrap: str,
    scratch: Path,
    *,
    allow_network: bool,
    user: CommandUser | None = None,
    setpriv: str | None = None,
) -> str | None:
    """Run ``true`` the way commands run (as ``user``, with ``scratch`` standing in for a
    workspace); ``None`` if it works, else why not."""
    where = await asyncio.to_thread(os.path.realpath, scratch)
    fd = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        argv = bwrap_argv(
            bwrap,
            workspace=where,
            cwd=where,
            allow_network=allow_network,
            workspace_fd=fd,
            user=user,
            setpriv=setpriv,
        )
        process = await asyncio.create_subprocess_exec(
            *argv,
            "true",
            env={"PATH": _BASE_PATH},  # as commands get it: not the server's own
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=(fd,),
        )
        _, err = await asyncio.wait_for(process.communicate(), 30)
    except (OSError, ValueError, TimeoutError) as exc:
        return f"{bwrap} cannot run: {exc}"
    finally:
        os.close(fd)
    if process.returncode != 0:
        return f"{bwrap} fails here: {err.decode(errors='replace').strip()}"
    return None


def resource_limiter(jail: Jail, cgroups: Sequence[Path]) -> Callable[[], None]:
    """A ``preexec_fn`` (run in the forked child, after it changed user): join ``cgroups``
    first, so ``bwrap`` and everything it starts are counted, then apply the limits."""
    procs = [str(cgroup / "cgroup.procs") for cgroup in cgroups]

    def limit() -> None:
        for path in procs:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (jail.max_processes, jail.max_processes))
        if jail.max_memory_bytes > 0:
            cap = jail.max_memory_bytes
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        if jail.max_cpu_seconds > 0:
            # SIGXCPU at the limit (its default action ends the process); a process that
            # catches it gets SIGKILL one CPU second later.
            seconds = jail.max_cpu_seconds
            resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))

    return limit


class CommandCgroup:
    """Per-command cgroups (v1) of one controller under ``<hierarchy>/perdure-sandbox``,
    each limited by writing its ``limit_file`` (``pids.max``, ``memory.limit_in_bytes``).

    A command's process joins its cgroups between fork and exec (see
    :func:`resource_limiter`), so every process it ever starts is counted. Its cgroups are
    removed when it is over (a pid namespace guarantees no member outlives it for long).
    """

    def __init__(self, parent: Path, limit_file: str) -> None:
        self.parent = parent
        self.limit_file = limit_file

    @classmethod
    def open(
        cls, controller: str, limit_file: str, root: Path = _CGROUP_V1
    ) -> CommandCgroup | None:
        """The parent cgroup, created if needed; ``None`` if the host has no writable one."""
        parent = root / controller / "perdure-sandbox"
        try:
            parent.mkdir(exist_ok=True)
            (parent / limit_file).read_text()
        except OSError:
            return None
        return cls(parent, limit_file)

    def _path(self, key: str) -> Path:
        return self.parent / hashlib.sha256(key.encode()).hexdigest()[:32]

    def create(self, key: str, limit: int, owner: tuple[int, int] | None) -> Path:
        """A fresh cgroup for one command, limited to ``limit``; ``owner`` (the user
        commands run as) may move itself into it."""
        path = self._path(key)
        path.mkdir(exist_ok=True)
        (path / self.limit_file).write_text(str(limit))
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

    def sweep(self, *, min_age_s: float = _SWEEP_MIN_AGE_S) -> None:
        """Remove the empty cgroups a previous server process left behind.

        The hierarchy is shared by every sandbox server on the host, and a command's cgroup
        is empty between its creation and the command joining it: one younger than
        ``min_age_s`` may belong to a live server about to start a command (removing it
        would fail that command's spawn), so it is left for a later sweep.
        """
        now = time.time()
        for child in self.parent.iterdir():
            with contextlib.suppress(OSError):
                if child.is_dir() and now - child.stat().st_mtime >= min_age_s:
                    child.rmdir()
