"""Wire models shared by the sandbox server and the client (pure pydantic, no I/O).

Conventions:

* Every route lives under ``/v1``. Times are **milliseconds** on the wire (``wait_ms``,
  ``timeout_ms``); the ``ExecutionEnv`` port uses seconds and the client converts.
* ``POST /v1/ops`` takes one :data:`OpRequest`, a union discriminated by ``kind``. Mutating
  kinds (``write``, ``edit``, ``bash``) need an ``op_id`` and are recorded under it; read-only
  kinds are never recorded, so they take no ``op_id`` (nor ``attempt`` or ``wait_ms``) and
  answer ``op_id: null``.
* Requests are strict, and the schemas say so: unknown fields are refused, strings are
  strings, booleans are ``true``/``false``, and integers are what JSON Schema calls integers:
  numbers without a fractional part (``5406`` and ``5406.0``; not ``false``, ``"5406"`` or
  ``5406.5``). After parsing, every body
  passes core's JSON gate (:func:`admit`): a lone surrogate anywhere is a 422, before the op
  is fingerprinted or recorded.
* The request fingerprint is the SHA-256 of the canonical JSON of ``{kind, args}``;
  ``op_id``, ``attempt`` and ``wait_ms`` are transport fields outside it.
* An op that ran answers ``200`` (finished) or ``202`` (still running) with an
  :class:`OpRecord`; a tool-level failure is ``200`` with ``status: "failed"`` and an
  ``error``, so it is recorded and replayable. Requests refused before any side effect answer
  ``4xx`` with :class:`ErrorResponse` and are not recorded.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
)

from core.jsonvalue import json_copy
from remote_env.workspace_names import WORKSPACE_REGEX

__all__ = [
    "MUTATING_KINDS",
    "OP_ID_REGEX",
    "PROTOCOL_VERSION",
    "TERMINAL_STATUSES",
    "WORKSPACE_REGEX",
    "BashArgs",
    "BashOutput",
    "BashRequest",
    "CancelRequest",
    "EditArgs",
    "EditItem",
    "EditOutput",
    "EditRequest",
    "ErrorBody",
    "ErrorResponse",
    "FindArgs",
    "FindOutput",
    "FindRequest",
    "GrepArgs",
    "GrepMatchModel",
    "GrepOutput",
    "GrepRequest",
    "HealthResponse",
    "InfoResponse",
    "LsArgs",
    "LsEntryModel",
    "LsOutput",
    "LsRequest",
    "OpKind",
    "OpOutput",
    "OpRecord",
    "OpRequest",
    "OpStatusName",
    "OutputChunk",
    "ReadArgs",
    "ReadOutput",
    "ReadRequest",
    "SearchStop",
    "WriteArgs",
    "WriteOutput",
    "WriteRequest",
    "admit",
    "fingerprint",
]

PROTOCOL_VERSION: Final = 1
OP_ID_REGEX: Final = r"^[A-Za-z0-9._:-]{1,255}$"

OpKind = Literal["read", "write", "edit", "ls", "find", "grep", "bash"]
MUTATING_KINDS: Final[frozenset[str]] = frozenset({"write", "edit", "bash"})

OpStatusName = Literal["running", "succeeded", "failed", "timed_out", "cancelled", "lost"]
TERMINAL_STATUSES: Final[frozenset[str]] = frozenset(
    {"succeeded", "failed", "timed_out", "cancelled", "lost"}
)

_MAX_PATH = 4096
#: Bound of the open-ended integers: the largest integer a JSON number holds exactly.
_MAX_INT = 2**53 - 1


class _Request(BaseModel):
    # Requests are strict at the boundary: unknown fields are errors, not silently dropped,
    # and no coercion (``false`` or ``5406.0`` is not an integer, ``1`` is not a boolean).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _Response(BaseModel):
    # Responses tolerate fields added by a newer server.
    model_config = ConfigDict(extra="ignore", frozen=True)


def _check_path(value: str) -> str:
    if "\x00" in value:
        raise ValueError("path must not contain NUL")
    if not value:
        raise ValueError("path must not be empty")
    return value


#: Text without NUL (which no path, command or environment value can hold).
_NO_NUL = r"^[^\x00]*$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _json_integer(value: object) -> object:
    # JSON Schema's "integer" is any number without a fractional part, so 5406.0 is one
    # (refusing it would reject schema-valid requests); a boolean or a string is not.
    if type(value) is float and value.is_integer():
        return int(value)
    if type(value) is not int:
        raise ValueError("must be an integer")
    return value


_INTEGER = BeforeValidator(_json_integer)
#: An integer as JSON Schema defines it (the models are otherwise strict). Constraints of an
#: optional one go inside, before the validator: ``Annotated[int, Field(ge=1), _INTEGER]``
#: (pydantic leaves them untranslated in the schema otherwise).
JsonInt = Annotated[int, _INTEGER]

PathStr = Annotated[
    str, Field(min_length=1, max_length=_MAX_PATH, pattern=_NO_NUL), AfterValidator(_check_path)
]
# The schema states the name rule as ``propertyNames`` (pydantic would write
# ``patternProperties``, which lets every other name through).
EnvMap = Annotated[
    dict[str, str],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": _ENV_NAME},
            "additionalProperties": {"type": "string", "pattern": _NO_NUL},
        }
    ),
]


# ---------------------------------------------------------------------------- arguments


class ReadArgs(_Request):
    """Read a window of lines (see ``ExecutionEnv.read``)."""

    path: PathStr
    offset: JsonInt = Field(default=1, ge=1, le=_MAX_INT)
    limit: Annotated[int, Field(ge=1, le=_MAX_INT), _INTEGER] | None = None
    max_bytes: Annotated[int, Field(ge=1, le=_MAX_INT), _INTEGER] | None = None


class WriteArgs(_Request):
    """Replace a file's content atomically, creating parent directories."""

    path: PathStr
    content: str


class EditItem(_Request):
    """One exact replacement."""

    old_text: str
    new_text: str


class EditArgs(_Request):
    """Several exact, unique replacements in one file, all or nothing."""

    path: PathStr
    edits: list[EditItem] = Field(min_length=1, max_length=1000)


class LsArgs(_Request):
    """List one directory."""

    path: PathStr = "."
    limit: JsonInt = Field(default=500, ge=1, le=100_000)


class FindArgs(_Request):
    """Find paths by glob."""

    pattern: str = Field(min_length=1, max_length=1024)
    path: PathStr = "."
    limit: JsonInt = Field(default=1000, ge=1, le=100_000)


class GrepArgs(_Request):
    """Search file contents with a regular expression (RE2 syntax: no backreferences or
    lookaround; matched line by line)."""

    pattern: str = Field(min_length=1, max_length=4096)
    path: PathStr = "."
    glob: str | None = Field(default=None, min_length=1, max_length=1024)
    ignore_case: bool = False
    literal: bool = False
    context: JsonInt = Field(default=0, ge=0, le=100)
    limit: JsonInt = Field(default=100, ge=1, le=10_000)
    max_line_length: JsonInt = Field(default=500, ge=1, le=100_000)


class BashArgs(_Request):
    """Run a shell command; stdout and stderr are merged."""

    command: str = Field(min_length=1, max_length=1_000_000, pattern=_NO_NUL)
    cwd: PathStr | None = None
    env: EnvMap | None = None
    timeout_ms: Annotated[int, Field(ge=1, le=_MAX_INT), _INTEGER] | None = None

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\x00" in value:
            raise ValueError("command must not contain NUL")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        for name, item in value.items():
            if not name or not (name[0].isalpha() or name[0] == "_"):
                raise ValueError(f"invalid environment variable name {name!r}")
            if not all(ch.isalnum() or ch == "_" for ch in name) or not name.isascii():
                raise ValueError(f"invalid environment variable name {name!r}")
            if "\x00" in item:
                raise ValueError(f"environment variable {name} contains NUL")
        return value


# ---------------------------------------------------------------------------- requests


class _ReadOnlyRequest(_Request):
    """A read-only op: run at once and never recorded, so it has no op id."""


class _MutatingRequest(_Request):
    """A recorded op: ``op_id`` names it (retries with the same id join it)."""

    op_id: str = Field(pattern=OP_ID_REGEX)
    attempt: JsonInt = Field(default=1, ge=1, le=2**31 - 1)
    #: How long the POST may wait for the op to finish before answering 202.
    wait_ms: JsonInt = Field(default=0, ge=0, le=60_000)


class ReadRequest(_ReadOnlyRequest):
    """``POST /v1/ops`` for ``read``."""

    kind: Literal["read"]
    args: ReadArgs


class WriteRequest(_MutatingRequest):
    """``POST /v1/ops`` for ``write`` (needs ``op_id``)."""

    kind: Literal["write"]
    args: WriteArgs


class EditRequest(_MutatingRequest):
    """``POST /v1/ops`` for ``edit`` (needs ``op_id``)."""

    kind: Literal["edit"]
    args: EditArgs


class LsRequest(_ReadOnlyRequest):
    """``POST /v1/ops`` for ``ls``."""

    kind: Literal["ls"]
    args: LsArgs


class FindRequest(_ReadOnlyRequest):
    """``POST /v1/ops`` for ``find``."""

    kind: Literal["find"]
    args: FindArgs


class GrepRequest(_ReadOnlyRequest):
    """``POST /v1/ops`` for ``grep``."""

    kind: Literal["grep"]
    args: GrepArgs


class BashRequest(_MutatingRequest):
    """``POST /v1/ops`` for ``bash`` (needs ``op_id``)."""

    kind: Literal["bash"]
    args: BashArgs


OpRequest = Annotated[
    ReadRequest | WriteRequest | EditRequest | LsRequest | FindRequest | GrepRequest | BashRequest,
    Field(discriminator="kind"),
]


class CancelRequest(_Request):
    """``POST /v1/ops/{op_id}/cancel``: both modes kill the process group.

    ``abort`` records the op ``cancelled``; ``kill`` records the exit status the kill produced.
    """

    mode: Literal["abort", "kill"] = "abort"


def admit(request: BaseModel) -> None:
    """Run a parsed request through core's JSON gate.

    Raises:
        core.errors.InvalidJson: a string holds a lone surrogate (pydantic's ``str`` takes
            them; UTF-8, and so the fingerprint, the op log and every reply, cannot). String
            lengths are bounded by the models and the body limit, not by the gate's default.
    """
    json_copy(request.model_dump(), "body", max_string_chars=_MAX_GATED_STRING)


_MAX_GATED_STRING: Final = 2**62


def fingerprint(kind: str, args: BaseModel) -> str:
    """SHA-256 of the canonical JSON of ``{kind, args}`` (defaults included, keys sorted)."""
    canonical = json.dumps(
        {"kind": kind, "args": args.model_dump(mode="json")},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------- results


class ReadOutput(_Response):
    """Result of ``read`` (mirrors ``core.env.ReadResult``)."""

    kind: Literal["read"] = "read"
    text: str
    offset: int
    lines: int
    total_lines: int
    total_bytes: int
    truncated: bool = False
    next_line_bytes: int | None = None


class WriteOutput(_Response):
    """Result of ``write``."""

    kind: Literal["write"] = "write"
    path: str
    bytes_written: int
    sha256: str


class EditOutput(_Response):
    """Result of ``edit``."""

    kind: Literal["edit"] = "edit"
    path: str
    replacements: int
    first_changed_line: int
    diff: str
    sha256: str


class LsEntryModel(_Response):
    """One directory entry."""

    name: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int


class LsOutput(_Response):
    """Result of ``ls``."""

    kind: Literal["ls"] = "ls"
    entries: list[LsEntryModel]
    truncated: bool = False


SearchStop = Literal["limit", "scan_bytes", "deadline"]
"""Why a search stopped early: the request's ``limit``, the server's scan cap (bytes read
per search) or its time limit per search."""


class FindOutput(_Response):
    """Result of ``find``; ``stopped_by`` names the limit that cut it short, if one did."""

    kind: Literal["find"] = "find"
    paths: list[str]
    truncated: bool = False
    stopped_by: SearchStop | None = None


class GrepMatchModel(_Response):
    """One reported line."""

    path: str
    line: int
    text: str
    is_context: bool = False


class GrepOutput(_Response):
    """Result of ``grep``; ``stopped_by`` names the limit that cut it short, if one did.

    ``long_lines`` counts lines longer than the server's line cap (4 MiB), which were
    searched in their first 4 MiB only.
    """

    kind: Literal["grep"] = "grep"
    matches: list[GrepMatchModel]
    truncated: bool = False
    stopped_by: SearchStop | None = None
    long_lines: int = 0


class BashOutput(_Response):
    """Result of ``bash``: the tail of the merged output plus totals."""

    kind: Literal["bash"] = "bash"
    exit_code: int | None
    signal: int | None = None
    output: str
    truncated: bool
    total_bytes: int
    total_lines: int
    timed_out: bool = False


OpOutput = Annotated[
    ReadOutput | WriteOutput | EditOutput | LsOutput | FindOutput | GrepOutput | BashOutput,
    Field(discriminator="kind"),
]


class ErrorBody(_Response):
    """A failure: ``code`` is the contract, ``message`` is for humans."""

    code: str
    message: str
    path: str | None = None


class ErrorResponse(_Response):
    """Body of every 4xx/5xx answer."""

    error: ErrorBody


class OpRecord(_Response):
    """What the server knows about one op (or the answer to an unrecorded read-only call).

    ``result`` is set for ``succeeded`` and, with partial output, for ``timed_out`` and
    ``cancelled``; ``error`` is set for every status other than ``succeeded`` and ``running``.
    ``replayed`` is true when this answer came from an earlier request with the same op id.
    ``output_bytes`` is how much streamable output the op has logged so far.
    """

    op_id: str | None
    kind: OpKind
    status: OpStatusName
    attempt: int = 1
    replayed: bool = False
    result: OpOutput | None = None
    error: ErrorBody | None = None
    created_at: float
    finished_at: float | None = None
    output_bytes: int = 0

    @property
    def finished(self) -> bool:
        """True once the status is terminal."""
        return self.status in TERMINAL_STATUSES


class OutputChunk(_Response):
    """Data of an SSE ``output`` event: bytes ``[offset, offset + len)`` of the log, decoded.

    The event's ``id`` is the byte offset just after the chunk; send it back as
    ``Last-Event-ID`` (or ``?offset=``) to resume.
    """

    offset: int
    text: str


class InfoResponse(_Response):
    """``GET /v1/info``: who the caller is and the server's limits."""

    protocol: int
    version: str
    workspace: str
    home: str
    limits: dict[str, Any]


class HealthResponse(_Response):
    """``GET /v1/health``."""

    status: Literal["ok"] = "ok"
