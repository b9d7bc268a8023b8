"""Wire models → core values and typed core errors (the client's error-mapping edge)."""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from core.env import (
    DirEntry,
    EditResult,
    EnvAuthError,
    EnvError,
    EnvProtocolError,
    EnvUnavailable,
    ExecResult,
    FindResult,
    GrepMatch,
    GrepResult,
    LsResult,
    OpLost,
    OpResult,
    ReadResult,
    RequestTooLarge,
    WriteResult,
    error_from_code,
)
from remote_env.protocol import (
    BashOutput,
    EditOutput,
    ErrorBody,
    ErrorResponse,
    FindOutput,
    GrepOutput,
    LsOutput,
    OpRecord,
    ReadOutput,
    WriteOutput,
)

__all__ = [
    "error_from_body",
    "error_from_record",
    "error_from_response",
    "exec_result",
    "op_result",
    "parse_record",
    "to_core",
]


def exec_result(output: BashOutput) -> ExecResult:
    """``BashOutput`` → ``ExecResult``."""
    return ExecResult(
        exit_code=output.exit_code,
        output=output.output,
        truncated=output.truncated,
        total_bytes=output.total_bytes,
        total_lines=output.total_lines,
        signal=output.signal,
        timed_out=output.timed_out,
    )


def to_core(
    output: ReadOutput | WriteOutput | EditOutput | LsOutput | FindOutput | GrepOutput | BashOutput,
) -> ReadResult | WriteResult | EditResult | LsResult | FindResult | GrepResult | ExecResult:
    """Convert any wire result to its core value."""
    if isinstance(output, ReadOutput):
        return ReadResult(
            text=output.text,
            offset=output.offset,
            lines=output.lines,
            total_lines=output.total_lines,
            total_bytes=output.total_bytes,
            truncated=output.truncated,
            next_line_bytes=output.next_line_bytes,
        )
    if isinstance(output, WriteOutput):
        return WriteResult(
            path=output.path, bytes_written=output.bytes_written, sha256=output.sha256
        )
    if isinstance(output, EditOutput):
        return EditResult(
            path=output.path,
            replacements=output.replacements,
            first_changed_line=output.first_changed_line,
            diff=output.diff,
            sha256=output.sha256,
        )
    if isinstance(output, LsOutput):
        return LsResult(
            entries=tuple(DirEntry(e.name, e.kind, e.size) for e in output.entries),
            truncated=output.truncated,
        )
    if isinstance(output, FindOutput):
        return FindResult(
            paths=tuple(output.paths), truncated=output.truncated, stopped_by=output.stopped_by
        )
    if isinstance(output, GrepOutput):
        return GrepResult(
            matches=tuple(GrepMatch(m.path, m.line, m.text, m.is_context) for m in output.matches),
            truncated=output.truncated,
            stopped_by=output.stopped_by,
        )
    return exec_result(output)


def op_result(record: OpRecord) -> OpResult | None:
    """The core value of a mutating op's result, if it has one."""
    value = None if record.result is None else to_core(record.result)
    if isinstance(value, WriteResult | EditResult | ExecResult):
        return value
    return None


def error_from_body(body: ErrorBody, *, result: ExecResult | None = None) -> EnvError:
    """A wire error → the typed core error."""
    return error_from_code(body.code, body.message, path=body.path, result=result)


def error_from_record(record: OpRecord) -> EnvError:
    """The error a finished, unsuccessful record stands for."""
    if record.status == "lost":
        message = record.error.message if record.error else "the op was lost"
        return OpLost(message)
    partial = exec_result(record.result) if isinstance(record.result, BashOutput) else None
    body = record.error or ErrorBody(code="unknown", message=f"op ended {record.status}")
    return error_from_body(body, result=partial)


def parse_record(response: httpx.Response) -> OpRecord:
    """Parse an op record body.

    Raises:
        EnvProtocolError: the body is not an op record.
    """
    try:
        return OpRecord.model_validate_json(response.content)
    except ValidationError as exc:
        raise EnvProtocolError(f"unexpected answer from the sandbox: {exc}") from None


def error_from_response(response: httpx.Response) -> EnvError:
    """Map a 4xx/5xx answer to a typed core error."""
    try:
        body: ErrorBody | None = ErrorResponse.model_validate_json(response.content).error
    except ValidationError:
        body = None
    status = response.status_code
    message = body.message if body else f"HTTP {status}"
    if status == 401:
        return EnvAuthError(message)
    if status == 413:
        return RequestTooLarge(message)
    if status >= 500:
        return EnvUnavailable(f"sandbox server error: {message}")
    if body is not None:
        return error_from_body(body)
    return EnvProtocolError(f"unexpected HTTP {status} from the sandbox")
