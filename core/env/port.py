"""The :class:`ExecutionEnv` protocol itself, and :class:`OpStatus`, what its
:meth:`~ExecutionEnv.op_status` answers (it holds an :class:`~core.env.errors.EnvError`,
so it sits above both :mod:`core.env.values` and :mod:`core.env.errors`).

The conventions every method follows are in :mod:`core.env`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Protocol, runtime_checkable

from core.env.errors import EnvError
from core.env.values import (
    EditResult,
    ExecResult,
    FindResult,
    GrepOptions,
    GrepResult,
    LsResult,
    OpRef,
    OpResult,
    OpState,
    OutputCallback,
    ReadResult,
    TextEdit,
    WriteResult,
)
from core.readonly import readonly

__all__ = [
    "ExecutionEnv",
    "OpStatus",
]


@readonly
class OpStatus:
    """What the environment knows about an op id.

    ``state``:

    * ``"running"``: the op is executing;
    * ``"done"``: it finished; ``result`` holds its value, or ``error`` the failure it
      recorded (for example :class:`EditNotUnique` or :class:`CommandTimeout`);
    * ``"lost"``: the environment restarted while it ran; whether it took effect is unknown;
    * ``"unknown"``: the environment never received it (or has forgotten it after its
      retention period).
    """

    state: OpState
    kind: str | None = None
    result: OpResult | None = None
    error: EnvError | None = field(default=None, compare=False)


# --------------------------------------------------------------------------------------
# The port
# --------------------------------------------------------------------------------------


@runtime_checkable
class ExecutionEnv(Protocol):
    """Files and a shell in one workspace, reached without OS access from core.

    Every method is a coroutine and may raise :class:`EnvUnavailable`,
    :class:`EnvAuthError`, :class:`RequestTooLarge` or :class:`EnvProtocolError` in addition
    to the errors listed on it. Read-only methods are safe to repeat; mutating methods are
    made safe to repeat by their :class:`OpRef`.
    """

    async def read(
        self, path: str, offset: int = 1, limit: int | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        """Return up to ``limit`` whole lines of a text file starting at line ``offset``.

        ``offset`` is 1-based. The window also stops before a line that would bring it over
        ``max_bytes`` (UTF-8, counting the joining newlines), so a line is never cut; if the
        first line alone is too big the window is empty with ``truncated`` set. An offset past
        the end gives an empty window and the file's ``total_lines``; it is not an error.

        Raises:
            PathNotFound, PathIsDirectory, PathOutsideWorkspace, EnvPermissionDenied,
            InvalidEnvRequest (not a regular file; ``offset < 1``).
        """
        ...

    async def write(self, path: str, content: str, op: OpRef) -> WriteResult:
        """Replace the file's content with ``content`` (UTF-8), creating parent directories.

        The replacement is atomic: readers see the old or the new content, never a mix.

        Raises:
            PathOutsideWorkspace, PathIsDirectory, PathNotDirectory, EnvPermissionDenied,
            OpConflict, OpLost.
        """
        ...

    async def edit(self, path: str, edits: Sequence[TextEdit], op: OpRef) -> EditResult:
        """Apply several exact replacements to one file, all or nothing.

        Every ``old_text`` must be non-empty and occur exactly once in the *original* content;
        edits may not overlap and must change something. Line endings (CRLF) and a UTF-8 BOM
        are preserved. The new content is written atomically.

        Raises:
            EditNotFound, EditNotUnique, EditOverlap, EditNoChange, InvalidEnvRequest (no
            edits, empty ``old_text``), PathNotFound, PathOutsideWorkspace, OpConflict, OpLost.
        """
        ...

    async def ls(self, path: str = ".", *, limit: int | None = None) -> LsResult:
        """List a directory, sorted by name, dotfiles included, at most ``limit`` entries.

        Raises:
            PathNotFound, PathNotDirectory, PathOutsideWorkspace, EnvPermissionDenied.
        """
        ...

    async def find(self, pattern: str, path: str = ".", *, limit: int | None = None) -> FindResult:
        """Find files and directories under ``path`` whose name matches the glob ``pattern``.

        A pattern containing ``/`` is matched against the path relative to ``path``; ``**``
        crosses directories, ``*`` and ``?`` do not, ``{a,b}`` alternates. Symlinks are not
        followed and ``.git`` directories are skipped.

        Raises:
            PathNotFound, PathNotDirectory, PathOutsideWorkspace, InvalidEnvRequest.
        """
        ...

    async def grep(
        self, pattern: str, path: str = ".", options: GrepOptions | None = None
    ) -> GrepResult:
        """Search files under ``path`` (or the file ``path``) for a regular expression.

        Binary files are skipped; see :class:`GrepOptions` for filters and caps.

        Raises:
            InvalidEnvRequest (bad pattern), PathNotFound, PathOutsideWorkspace.
        """
        ...

    async def run_command(
        self,
        command: str,
        *,
        op: OpRef,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecResult:
        """Run ``command`` with the environment's shell in its own process group.

        On the sandbox host's HTTP protocol this op keeps its wire kind ``bash`` (op logs
        and clients already written speak it); only this Python method is named for what it
        does.

        ``cwd`` defaults to the workspace root; ``env`` adds variables to a minimal
        environment; ``timeout`` (seconds) defaults to the environment's default (120 s on the
        reference server) and is capped by its maximum. On timeout the whole process group is
        killed. ``on_output`` receives the merged output as it arrives (from the start, also
        when the call recovers an op that was already running). A non-zero exit status is a
        result, not an error.

        Cancelling the awaiting coroutine stops waiting but does not stop the command: use
        :meth:`cancel` to kill it.

        Raises:
            CommandTimeout, CommandCancelled, SpawnError, InvalidEnvRequest (bad cwd or env),
            PathOutsideWorkspace (cwd), OpConflict, OpLost.
        """
        ...

    async def op_status(self, op_id: str) -> OpStatus:
        """Report what the environment recorded for ``op_id`` without waiting or re-running.

        Returns ``done`` with the recorded result (or recorded error), ``running``, ``lost``
        or ``unknown``. Never raises for a finished op that failed: the failure is in
        :attr:`OpStatus.error`.
        """
        ...

    async def cancel(self, op_id: str) -> OpStatus:
        """Kill a running op's process group and record it as cancelled.

        Idempotent: an op that already finished keeps its recorded outcome, which is returned.
        """
        ...
