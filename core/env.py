"""The ``ExecutionEnv`` port: how tools reach files and shells (SPEC §9).

Core never touches the operating system (SPEC §3, invariant 16). The coding tools reach a
workspace only through an object implementing :class:`ExecutionEnv`; the production adapter
is ``remote_env.client.RemoteEnv``, which speaks HTTP to a sandbox host.

Conventions shared by every method:

* **Paths** are relative to the workspace root. An absolute path is accepted only when it lies
  inside the workspace (as the environment reports its own root); anything that resolves
  outside it, through ``..``, an absolute path or a symlink, raises
  :class:`PathOutsideWorkspace` and touches nothing.
* **Time** is in seconds on this surface (``timeout``); adapters convert for their wire.
* **Ops.** Every mutating call (``write``, ``edit``, ``exec``) carries an :class:`OpRef`
  whose ``id`` is ``"<task id>:<tool call id>"``. The id is stable across retries and
  crashes: the environment executes an op id at most once and keeps its result, so repeating
  a call with the same id and the same request returns the recorded result instead of running
  it again, and :meth:`ExecutionEnv.op_status` can recover it later. The same id with a
  different request raises :class:`OpConflict`. ``attempt`` is informational only.
* **Errors** are raised, never returned, as subclasses of :class:`EnvError`. Subclasses of
  :class:`EnvOperationError` describe a failure the model can act on (missing file, ambiguous
  edit, timeout); the others describe the environment itself (unreachable, unauthorised, an op
  id reused for a different request, an op lost in a crash).

Error hierarchy (``EnvError`` derives from ``core.errors.PerdureError``)::

    EnvError
    ├── EnvOperationError           the request was understood; the operation failed
    │   ├── PathNotFound            not_found
    │   ├── PathOutsideWorkspace    outside_workspace
    │   ├── EnvPermissionDenied     permission_denied
    │   ├── PathNotDirectory        not_directory
    │   ├── PathIsDirectory         is_directory
    │   ├── InvalidEnvRequest       invalid
    │   ├── EditError
    │   │   ├── EditNotFound        edit_not_found
    │   │   ├── EditNotUnique       edit_not_unique
    │   │   ├── EditOverlap         edit_overlap
    │   │   └── EditNoChange        edit_no_change
    │   ├── CommandTimeout          timeout     (carries the partial ExecResult)
    │   ├── CommandCancelled        cancelled   (carries the partial ExecResult)
    │   └── SpawnError              spawn_error
    ├── OpConflict                  op_conflict
    ├── OpLost                      lost
    ├── EnvUnavailable              unavailable
    ├── EnvAuthError                unauthorized
    ├── RequestTooLarge             body_too_large
    └── EnvProtocolError            protocol
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from core.errors import PerdureError

__all__ = [
    "OP_ID_PATTERN",
    "CommandCancelled",
    "CommandTimeout",
    "DirEntry",
    "EditError",
    "EditNoChange",
    "EditNotFound",
    "EditNotUnique",
    "EditOverlap",
    "EditResult",
    "EnvAuthError",
    "EnvError",
    "EnvOperationError",
    "EnvPermissionDenied",
    "EnvProtocolError",
    "EnvUnavailable",
    "ExecResult",
    "ExecutionEnv",
    "FindResult",
    "GrepMatch",
    "GrepOptions",
    "GrepResult",
    "InvalidEnvRequest",
    "LsResult",
    "OpConflict",
    "OpLost",
    "OpRef",
    "OpResult",
    "OpState",
    "OpStatus",
    "OutputCallback",
    "PathIsDirectory",
    "PathNotDirectory",
    "PathNotFound",
    "PathOutsideWorkspace",
    "ReadResult",
    "RequestTooLarge",
    "SpawnError",
    "TextEdit",
    "WriteResult",
    "error_class_for_code",
    "error_from_code",
]

#: Op ids: at most 255 characters of ``[A-Za-z0-9._:-]`` (wire-safe, log-safe).
OP_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,255}")


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpRef:
    """Identity of one mutating call: ``id`` is ``"<task id>:<tool call id>"``.

    ``attempt`` counts how often the harness has issued this op (1 for the first try). It is
    not part of the op's identity: the environment dedupes on ``id`` alone.

    Raises:
        ValueError: ``id`` does not match :data:`OP_ID_PATTERN` or ``attempt < 1``.
    """

    id: str
    attempt: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or OP_ID_PATTERN.fullmatch(self.id) is None:
            raise ValueError(f"invalid op id {self.id!r}: use 1-255 of [A-Za-z0-9._:-]")
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int):
            raise ValueError("attempt must be an int")
        if self.attempt < 1:
            raise ValueError("attempt must be >= 1")


@dataclass(frozen=True, slots=True)
class TextEdit:
    """Replace the single exact occurrence of ``old_text`` with ``new_text``."""

    old_text: str
    new_text: str


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A window of whole lines from a UTF-8 text file.

    Lines are split on ``\\n``; a final newline does not start another line, so ``"a\\nb\\n"``
    has two lines and an empty file has none. Invalid UTF-8 is replaced with U+FFFD.

    Attributes:
        text: the lines of the window joined with ``\\n`` (no trailing newline).
        offset: 1-based number of the first line requested.
        lines: how many lines ``text`` holds (0 when ``offset`` is past the end, or when the
            first line alone exceeds ``max_bytes``).
        total_lines: lines in the whole file.
        total_bytes: size of the whole file in bytes.
        truncated: the window stopped early because the next line would exceed ``max_bytes``.
        next_line_bytes: when ``truncated``, the UTF-8 size of the first line left out.
    """

    text: str
    offset: int
    lines: int
    total_lines: int
    total_bytes: int
    truncated: bool = False
    next_line_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class WriteResult:
    """A completed write: ``bytes_written`` UTF-8 bytes now at ``path`` with ``sha256``."""

    path: str
    bytes_written: int
    sha256: str


@dataclass(frozen=True, slots=True)
class EditResult:
    """A completed edit.

    Attributes:
        path: the edited file.
        replacements: number of edits applied (all of them, or the call raised).
        first_changed_line: 1-based line of the first change in the new content.
        diff: unified diff of old against new content.
        sha256: hash of the new content.
    """

    path: str
    replacements: int
    first_changed_line: int
    diff: str
    sha256: str


@dataclass(frozen=True, slots=True)
class DirEntry:
    """One directory entry; ``kind`` describes the entry itself (symlinks are not followed)."""

    name: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int


@dataclass(frozen=True, slots=True)
class LsResult:
    """Entries of one directory sorted by name; ``truncated`` when ``limit`` cut the list."""

    entries: tuple[DirEntry, ...]
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class FindResult:
    """Paths matching a glob, relative to the search path, sorted.

    Directories end with ``/``. ``truncated`` when ``limit`` cut the list.
    """

    paths: tuple[str, ...]
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class GrepOptions:
    """Filters and caps for :meth:`ExecutionEnv.grep`.

    Attributes:
        glob: only files whose name (or relative path, when the glob has a ``/``) matches.
        ignore_case: case-insensitive matching.
        literal: treat the pattern as a plain string, not a regular expression.
        context: lines of context before and after each match.
        limit: maximum number of matching lines reported.
        max_line_length: longer lines are cut to this many characters.
    """

    glob: str | None = None
    ignore_case: bool = False
    literal: bool = False
    context: int = 0
    limit: int = 100
    max_line_length: int = 500

    def __post_init__(self) -> None:
        if self.context < 0 or self.limit < 1 or self.max_line_length < 1:
            raise ValueError("context must be >= 0, limit and max_line_length >= 1")


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One reported line: a match, or context around one (``is_context``)."""

    path: str
    line: int
    text: str
    is_context: bool = False


@dataclass(frozen=True, slots=True)
class GrepResult:
    """Matching lines in file order; ``truncated`` when ``limit`` matches were reached."""

    matches: tuple[GrepMatch, ...]
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class ExecResult:
    """Outcome of a shell command; stdout and stderr are merged into one stream.

    Attributes:
        exit_code: the process's exit status, or ``None`` when it was killed by a signal.
        output: the tail of the merged output, decoded as UTF-8 with replacement.
        truncated: ``output`` is not the whole output (the environment keeps a bounded tail).
        total_bytes: bytes the command wrote in total.
        total_lines: newline characters the command wrote in total.
        signal: the signal that ended the process, if any.
        timed_out: the environment killed the command at its timeout.
    """

    exit_code: int | None
    output: str
    truncated: bool
    total_bytes: int
    total_lines: int
    signal: int | None = None
    timed_out: bool = False


OpResult: TypeAlias = WriteResult | EditResult | ExecResult
OpState: TypeAlias = Literal["running", "done", "lost", "unknown"]

#: Receives decoded chunks of a command's merged output as they arrive; may be async.
OutputCallback: TypeAlias = Callable[[str], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
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
# Errors
# --------------------------------------------------------------------------------------


class EnvError(PerdureError):
    """Base of every execution-environment failure.

    Attributes:
        code: stable machine-readable code (the wire contract; messages are not).
        message: human-readable description, suitable to show to the model.
        path: the path involved, when there is one.
    """

    code: str = "unknown"

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class EnvOperationError(EnvError):
    """The environment understood the request and the operation failed.

    These are the failures a model can act on; the coding tools turn them into error results.
    """


class PathNotFound(EnvOperationError):
    """The path (or a parent directory) does not exist."""

    code = "not_found"


class PathOutsideWorkspace(EnvOperationError):
    """The path resolves outside the workspace; nothing was touched."""

    code = "outside_workspace"


class EnvPermissionDenied(EnvOperationError):
    """The environment's user may not access the path."""

    code = "permission_denied"


class PathNotDirectory(EnvOperationError):
    """A directory was required and the path is something else."""

    code = "not_directory"


class PathIsDirectory(EnvOperationError):
    """A file was required and the path is a directory."""

    code = "is_directory"


class InvalidEnvRequest(EnvOperationError):
    """Arguments the environment rejects: a bad regex, a non-regular file, a bad cwd, ..."""

    code = "invalid"


class EditError(EnvOperationError):
    """An edit could not be applied; the file is unchanged (edits are all-or-nothing)."""

    code = "edit_failed"


class EditNotFound(EditError):
    """An ``old_text`` does not occur in the file."""

    code = "edit_not_found"


class EditNotUnique(EditError):
    """An ``old_text`` occurs more than once; add context to make it unique."""

    code = "edit_not_unique"


class EditOverlap(EditError):
    """Two edits of one call touch overlapping text."""

    code = "edit_overlap"


class EditNoChange(EditError):
    """The edits would leave the file exactly as it is."""

    code = "edit_no_change"


class _CommandEnded(EnvOperationError):
    def __init__(
        self, message: str, *, path: str | None = None, result: ExecResult | None = None
    ) -> None:
        super().__init__(message, path=path)
        self.result = result


class CommandTimeout(_CommandEnded):
    """The command ran past its timeout and was killed with its process group.

    ``result`` holds the output it produced until then.
    """

    code = "timeout"


class CommandCancelled(_CommandEnded):
    """The command was cancelled and killed; ``result`` holds its partial output."""

    code = "cancelled"


class SpawnError(EnvOperationError):
    """The command could not be started (no shell, bad working directory, ...)."""

    code = "spawn_error"


class OpConflict(EnvError):
    """The op id was already used for a different request; nothing was executed."""

    code = "op_conflict"


class OpLost(EnvError):
    """The environment restarted while the op ran: it may or may not have taken effect."""

    code = "lost"


class EnvUnavailable(EnvError):
    """The environment could not be reached or failed internally (after retries)."""

    code = "unavailable"


class EnvAuthError(EnvError):
    """The credentials were missing, forged, expired or for another workspace."""

    code = "unauthorized"


class RequestTooLarge(EnvError):
    """The request exceeded the environment's size limit; nothing was executed."""

    code = "body_too_large"


class EnvProtocolError(EnvError):
    """The environment answered something this adapter does not understand."""

    code = "protocol"


_ERROR_CLASSES: dict[str, type[EnvError]] = {
    cls.code: cls
    for cls in (
        EnvError,
        PathNotFound,
        PathOutsideWorkspace,
        EnvPermissionDenied,
        PathNotDirectory,
        PathIsDirectory,
        InvalidEnvRequest,
        EditError,
        EditNotFound,
        EditNotUnique,
        EditOverlap,
        EditNoChange,
        CommandTimeout,
        CommandCancelled,
        SpawnError,
        OpConflict,
        OpLost,
        EnvUnavailable,
        EnvAuthError,
        RequestTooLarge,
        EnvProtocolError,
    )
}


def error_class_for_code(code: str) -> type[EnvError]:
    """Return the error class for a wire ``code``; unknown codes map to :class:`EnvError`."""
    return _ERROR_CLASSES.get(code, EnvError)


def error_from_code(
    code: str, message: str, *, path: str | None = None, result: ExecResult | None = None
) -> EnvError:
    """Build the typed error for a wire ``code`` (``result`` is kept by command errors)."""
    cls = error_class_for_code(code)
    if issubclass(cls, _CommandEnded):
        return cls(message, path=path, result=result)
    error = cls(message, path=path)
    if cls is EnvError:
        # Keep an unmapped code visible instead of silently reporting "unknown".
        error.code = code
    return error


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

    async def exec(
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
