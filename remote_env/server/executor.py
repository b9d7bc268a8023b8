"""Running shell commands: own session and process group, bounded output, group kill.

Each command runs as ``<shell> -c <command>`` with ``start_new_session=True``, so it leads a
new session and process group (pgid == pid) that survives a crash of the server and can be
killed as a whole with ``killpg``. stdout and stderr are merged into one pipe. Output is kept
twice, both bounded by ``max_output_bytes``: the head in an append-only log file (streamed to
clients by byte offset) and the tail in memory (returned in the result). Totals are counted in
full.

A command starts *gated*: the shell first reads a line from its stdin (a pipe the server
holds) and only then runs the command (``exec <shell> -c <command>``, same process, stdin
``/dev/null``). The server opens the gate (:meth:`CommandRun.release`) once the op log
records the process group; if the server dies before that, the gate reads end-of-file and
the shell exits without running anything. So a command never runs unrecorded: a restarted
server finds every started command's group in the op log and kills it.

The command is over when its leader has exited and the pipe has drained; descendants that keep
the pipe open get a short grace period, then the server stops reading (they are left alone
unless the command timed out or was cancelled, which kills the whole group). Confined
commands (see :mod:`remote_env.server.confine`) run under ``bwrap`` in their own pid
namespace, so their descendants end with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from remote_env.protocol import BashOutput
from remote_env.server.confine import Jail, bwrap_argv, resource_limiter
from remote_env.server.errors import ToolFailure
from remote_env.server.users import CommandUser

# Wait at the gate (see the module docstring), then become ``<shell> -c <command>``.
_GATED = 'IFS= read -r _ || exit 125; exec "$0" -c "$1" </dev/null'

__all__ = [
    "CommandOutcome",
    "CommandRun",
    "ProcessIdentity",
    "boot_id",
    "kill_orphan_group",
    "process_start_ticks",
]

_CHUNK = 64 * 1024
_DRAIN_GRACE_S = 0.2
_BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).

    Together with the boot id it identifies a process even after its pid is reused.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _process_state(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, pgrp, session, start ticks)`` of a process, or ``None`` if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def boot_id() -> str:
    """This boot's id (start ticks are only comparable within one boot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown"


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """What the op log stores to find a command's process group again after a crash."""

    pid: int
    pgid: int
    start_ticks: int | None
    boot_id: str


def kill_orphan_group(identity: ProcessIdentity) -> bool:
    """SIGKILL a process group left behind by a dead server, if it is provably ours.

    The leader's (pid, start ticks, boot id) must match what was recorded, so a reused pid is
    never killed. When the leader is gone but members of its group remain (a pgid cannot be
    reused while the group has members), members of that group and session that started no
    earlier than the leader are killed one by one. Returns whether anything was signalled.
    """
    if identity.start_ticks is None or identity.boot_id != boot_id():
        return False
    leader = _process_state(identity.pgid)
    if leader is not None:
        if leader[3] != identity.start_ticks:
            return False  # the pid now belongs to someone else
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(identity.pgid, signal.SIGKILL)
            return True
    signalled = False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        state = _process_state(int(entry))
        if (
            state is not None
            and state[1] == identity.pgid
            and state[2] == identity.pgid
            and state[3] >= identity.start_ticks
        ):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)
                signalled = True
    return signalled


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    """How a command ended."""

    output: BashOutput
    timed_out: bool
    cancelled: bool


def _tail_text(tail: bytes) -> str:
    # The tail may start inside a multi-byte character; drop the orphaned continuation bytes.
    start = 0
    while start < min(len(tail), 3) and tail[start] & 0xC0 == 0x80:
        start += 1
    return tail[start:].decode("utf-8", "replace")


class CommandRun:
    """One command execution; create, :meth:`start`, then :meth:`wait`.

    ``on_output(log_size)`` is called on the event loop after each chunk is logged.
    """

    def __init__(
        self,
        *,
        log_path: Path,
        max_output_bytes: int,
        on_output: Callable[[int], None],
        jail: Jail,
        key: str,
    ) -> None:
        self._jail = jail
        # Names the command's pids cgroup. The cgroup hierarchy is shared by every sandbox
        # server on the host, and op ids repeat across actors and servers ("<task>:<call>"),
        # so a random part keeps one command's cgroup from being another's (or from being
        # removed by a command that ended just before it started).
        self._key = f"{key}\x00{secrets.token_hex(8)}"
        self._log_path = log_path
        self._cap = max_output_bytes
        self._on_output = on_output
        self._process: asyncio.subprocess.Process | None = None
        self._output: asyncio.StreamReader | None = None
        self._output_transport: asyncio.ReadTransport | None = None
        self._tail = bytearray()
        self._total_bytes = 0
        self._total_lines = 0
        self._logged = 0
        self._cancel_requested = False
        self._kill_mode = False
        self._log_fd = -1
        self._gate = -1

    @property
    def log_size(self) -> int:
        """Bytes written to the log so far."""
        return self._logged

    async def start(
        self,
        command: str,
        *,
        cwd: str,
        env: Mapping[str, str] | None,
        home: str,
        user: CommandUser | None,
    ) -> ProcessIdentity:
        """Spawn the command, confined to ``home`` (its workspace) unless the jail is open.

        Raises:
            ToolFailure: ``spawn_error`` when the shell cannot be started.
        """
        shell = shutil.which("bash", path=_BASE_PATH) or "/bin/sh"
        environment = {
            "PATH": _BASE_PATH,
            "HOME": home,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
            "SHELL": shell,
        }
        if user is not None:
            environment["USER"] = environment["LOGNAME"] = user.name
        # The request's variables go on top of a minimal base: the server's own environment
        # (which may hold secrets) is never inherited.
        environment.update(env or {})
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_fd = os.open(
            self._log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )
        # Our own pipe rather than asyncio's: descendants may keep its write end open after
        # the command exits, and we must be able to close our read end regardless.
        jail = self._jail
        prefix: list[str] = []
        inherit: tuple[int, ...] = ()
        try:
            if jail.bwrap is not None:
                workspace_fd = os.open(
                    home, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                )
                inherit = (workspace_fd,)
                prefix = bwrap_argv(
                    jail.bwrap,
                    workspace=home,
                    cwd=cwd,
                    allow_network=jail.allow_network,
                    workspace_fd=workspace_fd,
                    user=user,
                    setpriv=jail.setpriv,
                )
            owner = None if user is None else user.owner
            cgroups = [group.create(self._key, limit, owner) for group, limit in jail.cgroups()]
        except OSError as exc:
            os.close(self._log_fd)
            for fd in inherit:
                os.close(fd)
            raise ToolFailure("spawn_error", f"cannot confine the command: {exc}") from None
        switch = user if jail.bwrap is None else None
        read_fd, write_fd = os.pipe()
        gate_read, self._gate = os.pipe()
        try:
            self._process = await asyncio.create_subprocess_exec(
                *prefix,
                shell,
                "-c",
                _GATED,
                shell,
                command,
                stdin=gate_read,
                stdout=write_fd,
                stderr=write_fd,
                cwd=cwd,
                env=environment,
                start_new_session=True,
                # Confined, setpriv changes user inside the jail (bwrap needs root to mount
                # a workspace the user may not reach by path); unconfined, the fork does.
                user=None if switch is None else switch.uid,
                group=None if switch is None else switch.gid,
                extra_groups=[] if switch is not None else None,
                preexec_fn=resource_limiter(jail, cgroups),
                pass_fds=inherit,
            )
        except (OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
            os.close(read_fd)
            os.close(self._log_fd)
            self._close_gate()
            raise ToolFailure("spawn_error", f"cannot start the command: {exc}") from None
        finally:
            os.close(write_fd)
            os.close(gate_read)
            for fd in inherit:
                os.close(fd)
        self._output = asyncio.StreamReader(limit=_CHUNK)
        reader = self._output
        self._output_transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        pid = self._process.pid
        return ProcessIdentity(
            pid=pid, pgid=pid, start_ticks=process_start_ticks(pid), boot_id=boot_id()
        )

    def release(self) -> None:
        """Let the started command run (call once its process group is recorded)."""
        if self._gate >= 0:
            with contextlib.suppress(OSError):  # the shell is gone already (killed)
                os.write(self._gate, b"go\n")
            self._close_gate()

    def _close_gate(self) -> None:
        if self._gate >= 0:
            os.close(self._gate)
            self._gate = -1

    def _record(self, chunk: bytes) -> None:
        self._total_bytes += len(chunk)
        self._total_lines += chunk.count(b"\n")
        room = self._cap - self._logged
        if room > 0:
            piece = chunk[:room]
            os.write(self._log_fd, piece)
            self._logged += len(piece)
        self._tail += chunk
        if len(self._tail) > self._cap:
            del self._tail[: len(self._tail) - self._cap]
        self._on_output(self._logged)

    async def _pump(self) -> None:
        assert self._output is not None
        while chunk := await self._output.read(_CHUNK):
            self._record(chunk)

    def kill(self, *, record_as_cancelled: bool = True) -> None:
        """SIGKILL the command's whole process group (idempotent)."""
        if record_as_cancelled:
            self._cancel_requested = True
        else:
            self._kill_mode = True
        self._close_gate()  # a command killed before it was released never runs
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._process.pid, signal.SIGKILL)

    async def wait(self, timeout_s: float) -> CommandOutcome:
        """Wait for the command to end, killing its group at ``timeout_s``."""
        process = self._process
        assert process is not None
        pump = asyncio.ensure_future(self._pump())
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), timeout_s)
            except TimeoutError:
                timed_out = not (self._cancel_requested or self._kill_mode)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
            if timed_out or self._cancel_requested or self._kill_mode:
                # Descendants were killed with the group; their pipe ends close promptly.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            done, _ = await asyncio.wait({pump}, timeout=_DRAIN_GRACE_S)
            if not done:
                pump.cancel()
        finally:
            if not pump.done():
                pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            if self._output_transport is not None:
                self._output_transport.close()
            os.close(self._log_fd)
            for group, _ in self._jail.cgroups():
                await group.remove(self._key)
        code = process.returncode
        exit_code = code if code is not None and code >= 0 else None
        sig = -code if code is not None and code < 0 else None
        output = BashOutput(
            exit_code=exit_code,
            signal=sig,
            output=_tail_text(bytes(self._tail)),
            truncated=self._total_bytes > len(self._tail),
            total_bytes=self._total_bytes,
            total_lines=self._total_lines,
            timed_out=timed_out,
        )
        return CommandOutcome(output=output, timed_out=timed_out, cancelled=self._cancel_requested)
