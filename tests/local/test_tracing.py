"""OpenTelemetry spans for one tool round, across the HTTP hop to a real sandbox server.

The sandbox server is the real app under uvicorn on 127.0.0.1 (in this process, so one
in-memory exporter sees both sides); the harness reaches it through ``RemoteEnv`` over
TCP. The trace context travels in the ``traceparent`` header.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path

import uvicorn
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from core.faux import FAUX_MODEL, FauxModel, faux_message, faux_tool_call
from core.harness import Harness, Registry
from core.storage import MemoryStorage
from core.tools import coding_tools
from remote_env.client import RemoteEnv
from remote_env.server import create_app
from runtimes.local.clock import SystemClock
from runtimes.local.server import bind
from runtimes.observe import HostTelemetry, ObservedModels, configure_logging
from runtimes.observe.logs import LOGGER
from tests.core.support import until
from tests.remote_env.support import FAST_RETRY, settings, token


def _one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def test_a_tool_round_is_one_trace_across_the_sandbox_hop(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    logs = io.StringIO()
    configure_logging("json", logs)

    root = tmp_path / "sandbox"
    root.mkdir()
    app = create_app(settings(root), tracer_provider=provider)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        await until(lambda: server.started)
        async with RemoteEnv(
            url, token("actor-t"), retry=FAST_RETRY, tracer_provider=provider
        ) as env:
            registry = Registry()
            registry.install(coding_tools())
            faux = FauxModel(
                [
                    faux_message(faux_tool_call("write", {"path": "a.txt", "content": "hi"})),
                    faux_message("written"),
                ]
            )
            h = await Harness.open(
                MemoryStorage(),
                models=ObservedModels(faux, tracer),
                registry=registry,
                env=lambda conversation_id, cwd: env,
                clock=SystemClock(),
                telemetry=HostTelemetry("actor-t", tracer),
            )
            conversation = await h.root(agent={"model": FAUX_MODEL.id})
            record = await (await conversation.submit("write it")).wait()
            assert record.status == "done"
            await h.close()
        assert (root / "actor-t" / "a.txt").read_text() == "hi"
    finally:
        server.should_exit = True
        await serving
        logging.getLogger(LOGGER).handlers.clear()

    spans = list(exporter.get_finished_spans())
    # The generation's request phase holds its model request.
    requests = [s for s in spans if s.name == "perdure.generation request"]
    models = [s for s in spans if s.name == f"model request {FAUX_MODEL.id}"]
    assert len(requests) == 2 and len(models) == 2
    assert {_parent_of(m) for m in models} == {r.context.span_id for r in requests}
    assert all(m.attributes and m.attributes["gen_ai.usage.output_tokens"] for m in models)
    # The tool phase → the tool → the sandbox client call → the sandbox server span.
    phase = next(s for s in spans if s.name.startswith("perdure.tool "))
    tool = _one(spans, "tool write")
    client = next(
        s for s in spans if s.kind == SpanKind.CLIENT and s.name.startswith("sandbox POST /v1/ops")
    )
    served = next(
        s for s in spans if s.kind == SpanKind.SERVER and _parent_of(s) == client.context.span_id
    )
    assert _parent_of(tool) == phase.context.span_id
    # The tool task belongs to the round's generation: its phase continues that trace.
    round_request = next(r for r in requests if r.context.span_id == _parent_of(phase))
    assert phase.context.trace_id == round_request.context.trace_id
    assert _parent_of(client) == tool.context.span_id
    assert served.context.trace_id == client.context.trace_id == phase.context.trace_id
    assert served.name == "sandbox POST /v1/ops"
    assert served.attributes and served.attributes["http.response.status_code"] == 200

    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    model_lines = [line for line in lines if line["kind"] == "model"]
    assert len(model_lines) == 2 and all(line["output_tokens"] > 0 for line in model_lines)
    assert all(line["model"] == FAUX_MODEL.id and "latency_ms" in line for line in model_lines)
    (tool_line,) = [line for line in lines if line["kind"] == "tool"]
    assert tool_line["tool"] == "write" and tool_line["ok"] is True
