"""The ``ExecutionEnv`` port: how tools reach files and shells
(docs/design.md § The execution environment).

Core never touches the operating system (docs/design.md, invariant 16). The coding tools
reach a workspace only through an object implementing :class:`ExecutionEnv`; the production
adapter is ``remote_env.client.RemoteEnv``, which speaks HTTP to a sandbox host.

Conventions shared by every method:

* **Paths** are relative to the workspace root. An absolute path is accepted only when it lies
  inside the workspace (as the environment reports its own root); anything that resolves
  outside it, through ``..``, an absolute path or a symlink, raises
  :class:`PathOutsideWorkspace` and touches nothing.
* **Time** is in seconds on this surface (``timeout``); adapters convert for their wire.
* **Ops.** Every mutating call (``write``, ``edit``, ``run_command``) carries an :class:`OpRef`
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

The surface lives in three modules re-exported here: :mod:`core.env.values`,
:mod:`core.env.errors` and :mod:`core.env.port`; import it from ``core.env``.
"""

from __future__ import annotations

from core.env.errors import (
    CommandCancelled,
    CommandTimeout,
    EditError,
    EditNoChange,
    EditNotFound,
    EditNotUnique,
    EditOverlap,
    EnvAuthError,
    EnvError,
    EnvOperationError,
    EnvPermissionDenied,
    EnvProtocolError,
    EnvUnavailable,
    InvalidEnvRequest,
    OpConflict,
    OpLost,
    PathIsDirectory,
    PathNotDirectory,
    PathNotFound,
    PathOutsideWorkspace,
    RequestTooLarge,
    SpawnError,
    error_class_for_code,
    error_from_code,
)
from core.env.port import ExecutionEnv, OpStatus
from core.env.values import (
    OP_ID_PATTERN,
    DirEntry,
    EditResult,
    ExecResult,
    FindResult,
    GrepMatch,
    GrepOptions,
    GrepResult,
    LsResult,
    OpRef,
    OpResult,
    OpState,
    OutputCallback,
    ReadResult,
    SearchStop,
    TextEdit,
    WriteResult,
)

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
    "SearchStop",
    "SpawnError",
    "TextEdit",
    "WriteResult",
    "error_class_for_code",
    "error_from_code",
]
