"""``RemoteEnv``: the ``ExecutionEnv`` port over HTTP to a sandbox server.

Retrying is safe because every mutating call carries its op id: a request that did reach the
server before the connection failed is absorbed as a replay of the same op. Connection
failures, timeouts and 502/503/504 answers are retried with the :class:`RetryPolicy`; every
other answer is mapped to a typed ``core.env`` error.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx
from opentelemetry import propagate, trace
from pydantic import ValidationError

from core.env import (
    OP_ID_PATTERN,
    EditResult,
    EnvError,
    EnvProtocolError,
    EnvUnavailable,
    ExecResult,
    ExecutionEnv,
    FindResult,
    GrepOptions,
    GrepResult,
    InvalidEnvRequest,
    LsResult,
    OpLost,
    OpRef,
    OpStatus,
    OutputCallback,
    ReadResult,
    TextEdit,
    WriteResult,
)
from remote_env.client.convert import (
    error_from_body,
    error_from_record,
    error_from_response,
    op_result,
    parse_record,
    to_core,
)
from remote_env.client.retry import RetryPolicy
from remote_env.client.sse import parse_sse
from remote_env.protocol import ErrorBody, InfoResponse, OpRecord, OutputChunk

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["RemoteEnv"]

_RETRY_STATUSES = frozenset({502, 503, 504})
# An op that keeps vanishing between submit and wait is refused for good after this many
# re-submissions (each one is answered by the server's own refusal).
_MAX_RESUBMITS = 3
_OP_PATH = re.compile(r"/v1/ops/[^/?]+")


def _route(url: str) -> str:
    """A span name's path: op ids vary per call, so they are left out."""
    return _OP_PATH.sub("/v1/ops/{id}", url.split("?", 1)[0])


class RemoteEnv:
    """An :class:`~core.env.ExecutionEnv` backed by a remote sandbox server.

    Args:
        base_url: the server, e.g. ``"http://127.0.0.1:8765"``.
        token: a workspace bearer token, or a callable returning a fresh one per request
            (tokens expire; the callable may refresh them).
        transport: an ``httpx.AsyncBaseTransport`` to use instead of the network (for example
            ``httpx.ASGITransport(app)`` to drive the server in-process).
        retry: retry policy for failures to reach the server.
        long_poll_s: how long one request waits for an op to finish (the server caps it).
        connect_timeout_s: TCP connect timeout per try.

    Use as an async context manager, or call :meth:`aclose`.
    """

    def __init__(
        self,
        base_url: str,
        token: str | Callable[[], str],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy | None = None,
        long_poll_s: float = 25.0,
        connect_timeout_s: float = 5.0,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not 0 <= long_poll_s <= 60:
            raise ValueError("long_poll_s must be within 0..60")
        self._token = token
        self._retry = retry or RetryPolicy()
        self._long_poll_ms = int(long_poll_s * 1000)
        self._timeout = httpx.Timeout(
            connect=connect_timeout_s, read=long_poll_s + 30.0, write=60.0, pool=60.0
        )
        # Between events the server sends a keep-alive comment at least every 15 s.
        self._stream_timeout = httpx.Timeout(
            connect=connect_timeout_s, read=60.0, write=60.0, pool=60.0
        )
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), transport=transport, timeout=self._timeout
        )
        # The global provider unless told otherwise (a no-op until a host configures one).
        self._tracer = trace.get_tracer("perdure.remote_env", tracer_provider=tracer_provider)

    async def __aenter__(self) -> RemoteEnv:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._http.aclose()

    # ------------------------------------------------------------------ transport

    def _headers(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        headers = {"Authorization": f"Bearer {token}"}
        propagate.inject(headers)  # traceparent: the sandbox server continues the trace
        return headers

    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        allow: frozenset[int] = frozenset({200, 202}),
    ) -> httpx.Response:
        """Send with retries; return a response whose status is in ``allow``.

        Raises:
            EnvUnavailable: the server stayed unreachable (or kept answering 502/503/504).
            EnvError: any other refusal, mapped from the error body.
        """
        with self._tracer.start_as_current_span(
            f"sandbox {method} {_route(url)}", kind=trace.SpanKind.CLIENT
        ) as span:
            response = await self._send(method, url, json=json, params=params, allow=allow)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    async def _send(
        self,
        method: str,
        url: str,
        *,
        json: Any,
        params: Mapping[str, Any] | None,
        allow: frozenset[int],
    ) -> httpx.Response:
        delays = self._retry.delays()
        while True:
            try:
                response = await self._http.request(
                    method, url, json=json, params=params, headers=self._headers()
                )
            except httpx.TransportError as exc:
                failure: EnvError = EnvUnavailable(f"cannot reach the sandbox: {exc!r}")
            else:
                if response.status_code in allow:
                    return response
                if response.status_code not in _RETRY_STATUSES:
                    raise error_from_response(response)
                failure = error_from_response(response)
            delay = next(delays, None)
            if delay is None:
                raise failure
            await self._retry.sleep(delay)

    # ------------------------------------------------------------------ ops

    async def _query(self, kind: str, args: dict[str, Any]) -> Any:
        """A read-only call (not recorded by the server)."""
        response = await self._request("POST", "/v1/ops", json={"kind": kind, "args": args})
        record = parse_record(response)
        if record.status != "succeeded" or record.result is None:
            raise error_from_record(record)
        return to_core(record.result)

    async def _submit(self, kind: str, args: dict[str, Any], op: OpRef, wait_ms: int) -> OpRecord:
        body = {
            "op_id": op.id,
            "attempt": op.attempt,
            "kind": kind,
            "args": args,
            "wait_ms": wait_ms,
        }
        return parse_record(await self._request("POST", "/v1/ops", json=body))

    async def _settled(self, kind: str, args: dict[str, Any], op: OpRef) -> OpRecord:
        """Submit a mutating op and long-poll until it is finished."""
        record = await self._submit(kind, args, op, self._long_poll_ms)
        resubmits = 0
        while not record.finished:
            response = await self._request(
                "GET",
                f"/v1/ops/{op.id}",
                params={"wait_ms": self._long_poll_ms},
                allow=frozenset({200, 202, 404}),
            )
            if response.status_code == 404:
                # The server dropped the op: it was refused before any side effect after we
                # were told it was running. Re-submitting returns that refusal directly.
                resubmits += 1
                if resubmits > _MAX_RESUBMITS:
                    raise EnvProtocolError(f"op {op.id} keeps disappearing from the sandbox")
                record = await self._submit(kind, args, op, self._long_poll_ms)
                continue
            record = parse_record(response)
        return record

    @staticmethod
    def _outcome(record: OpRecord) -> Any:
        if record.status == "succeeded" and record.result is not None:
            return to_core(record.result)
        raise error_from_record(record)

    # ------------------------------------------------------------------ the port

    async def read(
        self, path: str, offset: int = 1, limit: int | None = None, *, max_bytes: int | None = None
    ) -> ReadResult:
        """See :meth:`core.env.ExecutionEnv.read`."""
        if (
            offset < 1
            or (limit is not None and limit < 1)
            or (max_bytes is not None and max_bytes < 1)
        ):
            raise InvalidEnvRequest("offset, limit and max_bytes must be >= 1", path=path)
        result = await self._query(
            "read", {"path": path, "offset": offset, "limit": limit, "max_bytes": max_bytes}
        )
        assert isinstance(result, ReadResult)
        return result

    async def write(self, path: str, content: str, op: OpRef) -> WriteResult:
        """See :meth:`core.env.ExecutionEnv.write`."""
        record = await self._settled("write", {"path": path, "content": content}, op)
        result = self._outcome(record)
        assert isinstance(result, WriteResult)
        return result

    async def edit(self, path: str, edits: Sequence[TextEdit], op: OpRef) -> EditResult:
        """See :meth:`core.env.ExecutionEnv.edit`."""
        if not edits:
            raise InvalidEnvRequest("edit needs at least one replacement", path=path)
        payload = [{"old_text": e.old_text, "new_text": e.new_text} for e in edits]
        record = await self._settled("edit", {"path": path, "edits": payload}, op)
        result = self._outcome(record)
        assert isinstance(result, EditResult)
        return result

    async def ls(self, path: str = ".", *, limit: int | None = None) -> LsResult:
        """See :meth:`core.env.ExecutionEnv.ls`."""
        args: dict[str, Any] = {"path": path}
        if limit is not None:
            args["limit"] = limit
        result = await self._query("ls", args)
        assert isinstance(result, LsResult)
        return result

    async def find(self, pattern: str, path: str = ".", *, limit: int | None = None) -> FindResult:
        """See :meth:`core.env.ExecutionEnv.find`."""
        args: dict[str, Any] = {"pattern": pattern, "path": path}
        if limit is not None:
            args["limit"] = limit
        result = await self._query("find", args)
        assert isinstance(result, FindResult)
        return result

    async def grep(
        self, pattern: str, path: str = ".", options: GrepOptions | None = None
    ) -> GrepResult:
        """See :meth:`core.env.ExecutionEnv.grep`."""
        opts = options or GrepOptions()
        result = await self._query(
            "grep",
            {
                "pattern": pattern,
                "path": path,
                "glob": opts.glob,
                "ignore_case": opts.ignore_case,
                "literal": opts.literal,
                "context": opts.context,
                "limit": opts.limit,
                "max_line_length": opts.max_line_length,
            },
        )
        assert isinstance(result, GrepResult)
        return result

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
        """See :meth:`core.env.ExecutionEnv.run_command`."""
        args: dict[str, Any] = {"command": command, "cwd": cwd, "env": dict(env) if env else None}
        if timeout is not None:
            if not (math.isfinite(timeout) and timeout > 0):
                raise InvalidEnvRequest("timeout must be a positive number of seconds")
            args["timeout_ms"] = max(1, math.ceil(timeout * 1000))
        if on_output is None:
            record = await self._settled("bash", args, op)
        else:
            record = await self._submit("bash", args, op, 0)
            record = await self._follow(op, record, on_output, args)
        result = self._outcome(record)
        assert isinstance(result, ExecResult)
        return result

    async def _follow(
        self, op: OpRef, record: OpRecord, on_output: OutputCallback, args: dict[str, Any]
    ) -> OpRecord:
        """Stream an op's output from byte 0 to ``on_output``; return its final record.

        A dropped stream is resumed from the last offset received (``Last-Event-ID``).
        """
        offset = 0
        delays = self._retry.delays()
        resubmits = 0
        while True:
            headers = {**self._headers(), "Last-Event-ID": str(offset)}
            try:
                async with self._http.stream(
                    "GET",
                    f"/v1/ops/{op.id}/events",
                    headers=headers,
                    timeout=self._stream_timeout,
                ) as response:
                    if response.status_code == 404:
                        await response.aread()
                        resubmits += 1
                        if resubmits > _MAX_RESUBMITS:
                            raise EnvProtocolError(f"op {op.id} keeps disappearing")
                        await self._submit("bash", args, op, 0)
                        continue
                    if response.status_code != 200:
                        await response.aread()
                        if response.status_code not in _RETRY_STATUSES:
                            raise error_from_response(response)
                        raise httpx.RemoteProtocolError(f"HTTP {response.status_code}")
                    async for event in parse_sse(response.aiter_lines()):
                        if event.event == "output":
                            chunk = OutputChunk.model_validate_json(event.data)
                            outcome = on_output(chunk.text)
                            if inspect.isawaitable(outcome):
                                await outcome
                            offset = int(event.id) if event.id else offset + len(chunk.text)
                            delays = self._retry.delays()  # progress resets the backoff
                        elif event.event == "result":
                            return OpRecord.model_validate_json(event.data)
                        elif event.event == "error":
                            raise error_from_body(ErrorBody.model_validate_json(event.data))
                # The stream ended without a result: reconnect from where we are.
            except httpx.TransportError:
                pass
            except (ValidationError, ValueError) as exc:
                raise EnvProtocolError(f"bad event stream from the sandbox: {exc}") from None
            delay = next(delays, None)
            if delay is None:
                raise EnvUnavailable(f"lost the output stream of op {op.id}")
            await self._retry.sleep(delay)

    async def op_status(self, op_id: str) -> OpStatus:
        """See :meth:`core.env.ExecutionEnv.op_status`."""
        if OP_ID_PATTERN.fullmatch(op_id) is None:
            raise InvalidEnvRequest(f"invalid op id {op_id!r}")
        response = await self._request("GET", f"/v1/ops/{op_id}", allow=frozenset({200, 202, 404}))
        return self._status(response)

    async def cancel(self, op_id: str) -> OpStatus:
        """See :meth:`core.env.ExecutionEnv.cancel`."""
        if OP_ID_PATTERN.fullmatch(op_id) is None:
            raise InvalidEnvRequest(f"invalid op id {op_id!r}")
        response = await self._request(
            "POST",
            f"/v1/ops/{op_id}/cancel",
            json={"mode": "abort"},
            allow=frozenset({200, 202, 404}),
        )
        return self._status(response)

    @staticmethod
    def _status(response: httpx.Response) -> OpStatus:
        if response.status_code == 404:
            return OpStatus(state="unknown")
        record = parse_record(response)
        if record.status == "running":
            return OpStatus(state="running", kind=record.kind)
        if record.status == "lost":
            return OpStatus(state="lost", kind=record.kind, error=error_from_record(record))
        if record.status == "succeeded":
            return OpStatus(state="done", kind=record.kind, result=op_result(record))
        error = error_from_record(record)
        if isinstance(error, OpLost):
            return OpStatus(state="lost", kind=record.kind, error=error)
        return OpStatus(state="done", kind=record.kind, result=op_result(record), error=error)

    async def info(self) -> InfoResponse:
        """The workspace's absolute path on the sandbox (``home``) and the server's limits."""
        response = await self._request("GET", "/v1/info")
        try:
            return InfoResponse.model_validate_json(response.content)
        except ValidationError as exc:
            raise EnvProtocolError(f"unexpected answer from the sandbox: {exc}") from None


if TYPE_CHECKING:
    # Static proof that RemoteEnv implements the port (checked by mypy, never executed).
    _conforms: ExecutionEnv = RemoteEnv("http://sandbox", "token")
