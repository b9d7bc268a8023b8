"""A scripted OpenAI-compatible chat completions server for adapter tests.

It speaks real HTTP on 127.0.0.1 (Starlette served by uvicorn in a background thread),
so the adapters under test run their real network stacks. Each test scripts the replies
(one per request, in order) and afterwards inspects what the server received:

* :class:`Stream` sends ``data:`` lines (optionally slowly, optionally cutting the
  connection after some chunks, optionally never ending until the client leaves);
* :class:`Fail` answers with a status code, a JSON error body and headers.

A request arriving with no scripted reply gets a 599 so the test fails loudly.
Every streamed reply appends a :class:`StreamEnd` when its body generator stops, which
is how cancellation tests observe that the client closed the connection.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = [
    "Fail",
    "FakeOpenAI",
    "Received",
    "Stream",
    "StreamEnd",
    "context_overflow_body",
    "finish",
    "reasoning",
    "text",
    "tool_call",
    "usage",
]

# --------------------------------------------------------------------------- chunk builders


def _choice_chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}


def text(content: str) -> dict[str, Any]:
    return _choice_chunk({"role": "assistant", "content": content})


def reasoning(content: str) -> dict[str, Any]:
    return _choice_chunk({"role": "assistant", "reasoning_content": content})


def tool_call(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    call: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    return _choice_chunk({"role": "assistant", "tool_calls": [call]})


def finish(reason: str) -> dict[str, Any]:
    return _choice_chunk({}, finish_reason=reason)


def usage(
    prompt: int, completion: int, *, cached: int = 0, cache_write: int | None = None
) -> dict[str, Any]:
    details: dict[str, Any] = {"cached_tokens": cached}
    if cache_write is not None:
        details["cache_write_tokens"] = cache_write
    return {
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": details,
        },
    }


def context_overflow_body() -> dict[str, Any]:
    return {
        "error": {
            "message": (
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9000 tokens. Please reduce the length of the messages."
            ),
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


# --------------------------------------------------------------------------- script


@dataclass(frozen=True)
class Stream:
    """Stream ``chunks`` as SSE; ``delay`` seconds before each chunk.

    ``cut_after``: after that many chunks, drop the connection without finishing the
    body. ``forever``: after the chunks, keep sending keep-alive chunks every ``delay``
    (at least 20 ms) until the client goes away. ``stall``: seconds to wait before even
    sending the response headers (a client leaving meanwhile is recorded).
    """

    chunks: list[dict[str, Any]]
    delay: float = 0.0
    cut_after: int | None = None
    forever: bool = False
    done: bool = True
    stall: float = 0.0


@dataclass(frozen=True)
class Fail:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class StreamEnd:
    """A streamed reply stopped: ``completed`` is False when the client left first."""

    completed: bool
    chunks_sent: int
    at: float


class _CutConnection(Exception):
    """Raised inside a streaming body: uvicorn then drops the connection mid-body."""


class FakeOpenAI:
    def __init__(self) -> None:
        self._script: deque[Stream | Fail] = deque()
        self._lock = threading.Lock()
        self.received: list[Received] = []
        self.stream_ends: list[StreamEnd] = []
        self._stream_ended = threading.Condition(self._lock)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------------ test API

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *replies: Stream | Fail) -> None:
        with self._lock:
            self._script.extend(replies)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.received.clear()
            self.stream_ends.clear()

    def last_body(self) -> dict[str, Any]:
        with self._lock:
            assert self.received, "the server received no request"
            return self.received[-1].body

    def wait_stream_end(self, timeout: float) -> StreamEnd | None:
        """Block (in a thread) until a streamed reply has stopped."""
        deadline = time.monotonic() + timeout
        with self._stream_ended:
            while not self.stream_ends:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._stream_ended.wait(left)
            return self.stream_ends[-1]

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        app = Starlette(routes=[Route("/v1/chat/completions", self._handle, methods=["POST"])])
        config = uvicorn.Config(
            app, log_level="critical", access_log=False, lifespan="off", timeout_keep_alive=30
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("fake OpenAI server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------ server side

    async def _handle(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.received.append(
                Received(path=request.url.path, headers=dict(request.headers), body=body)
            )
            reply = self._script.popleft() if self._script else None
        if reply is None:
            return JSONResponse({"error": {"message": "no scripted reply"}}, status_code=599)
        if isinstance(reply, Fail):
            return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)
        deadline = time.monotonic() + reply.stall
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                self._record_end(StreamEnd(completed=False, chunks_sent=0, at=time.monotonic()))
                return Response(status_code=499)
            await asyncio.sleep(0.02)
        return StreamingResponse(
            self._sse(reply, str(body.get("model", ""))), media_type="text/event-stream"
        )

    async def _sse(self, reply: Stream, model: str) -> AsyncIterator[bytes]:
        sent = 0
        completed = False
        try:
            for chunk in reply.chunks:
                if reply.cut_after is not None and sent >= reply.cut_after:
                    raise _CutConnection
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                yield _frame(chunk, model)
                sent += 1
            while reply.forever:
                await asyncio.sleep(max(reply.delay, 0.02))
                yield _frame(_choice_chunk({"content": ""}), model)
                sent += 1
            if reply.done:
                yield b"data: [DONE]\n\n"
            completed = True
        finally:
            self._record_end(StreamEnd(completed, sent, time.monotonic()))

    def _record_end(self, end: StreamEnd) -> None:
        with self._stream_ended:
            self.stream_ends.append(end)
            self._stream_ended.notify_all()


def _frame(chunk: dict[str, Any], model: str) -> bytes:
    full = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        **chunk,
    }
    return f"data: {json.dumps(full)}\n\n".encode()
