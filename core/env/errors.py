"""The :class:`EnvError` hierarchy and its wire codes: every failure an
:class:`~core.env.ExecutionEnv` raises, and :func:`error_from_code` to rebuild one from
its code (the tree is drawn in :mod:`core.env`).
"""

from __future__ import annotations

from core.env.values import ExecResult
from core.errors import PerdureError

__all__ = [
    "CommandCancelled",
    "CommandTimeout",
    "EditError",
    "EditNoChange",
    "EditNotFound",
    "EditNotUnique",
    "EditOverlap",
    "EnvAuthError",
    "EnvError",
    "EnvOperationError",
    "EnvPermissionDenied",
    "EnvProtocolError",
    "EnvUnavailable",
    "InvalidEnvRequest",
    "OpConflict",
    "OpLost",
    "PathIsDirectory",
    "PathNotDirectory",
    "PathNotFound",
    "PathOutsideWorkspace",
    "RequestTooLarge",
    "SpawnError",
    "error_class_for_code",
    "error_from_code",
]


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
