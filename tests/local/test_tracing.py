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
from opentelemetry.trace import SpanKind, Tracer

from core.faux import FAUX_MODEL, FauxModel, faux_message, faux_tool_call
from core.harness import Harness, Registry, ToolContext
from core.storage import MemoryStorage
from core.tools import coding_tools
from remote_env.client import RemoteEnv
from remote_env.server import create_app
from runtimes.actor.clock import SystemClock
from runtimes.local.server import bind
from runtimes.observe import HostTelemetry, ObservedModels, configure_logging, describe_event
from runtimes.observe.logs import LOGGER
from tests.core.harness.support import MODEL, Args, Rig, extension, tool
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


def _exporting() -> tuple[InMemorySpanExporter, Tracer]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, provider.get_tracer("test")


async def test_a_run_recovered_after_a_crash_stays_one_trace(tmp_path: Path) -> None:
    """The run's trace context is kept with its tasks in the SQLite file: after a crash
    and a reopen of that file (a new telemetry, as in a new process), the recovered tool
    call and the next round are spans of the trace the run began in, not a new one."""
    exporter, tracer = _exporting()
    gate = asyncio.Event()
    runs: list[str] = []

    async def search(args: Args, ctx: ToolContext) -> str:
        runs.append(args.text)
        await gate.wait()
        return f"found {args.text}"

    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[
            faux_message(faux_tool_call("search", {"text": "trains"}, id="c1")),
            faux_message("the 9:00 train"),
        ],
    )
    rig.registry.install(extension("travel", tool("search", search, replay="safe")))
    rig.telemetry = HostTelemetry("actor-r", tracer)
    h = await rig.open()
    sub = await (await h.root(agent={"model": MODEL, "tools": ["search"]})).submit("find")
    await until(lambda: bool(runs))
    await rig.crash(h)
    before = list(exporter.get_finished_spans())
    (root,) = [s for s in before if s.parent is None]
    assert root.name == "perdure.generation"
    request = _one(before, "perdure.generation request")

    exporter.clear()
    gate.set()
    rig.telemetry = HostTelemetry("actor-r", tracer)  # the restarted process's
    h = await rig.open()
    record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done" and runs == ["trains", "trains"]  # safe: it reran
    await h.close()

    after = list(exporter.get_finished_spans())
    names = {s.name for s in after}
    assert {"perdure.tool execute", "tool search", "perdure.generation request"} <= names
    # One trace across the restart: no span after it begins a trace of its own ...
    assert {s.context.trace_id for s in after} == {root.context.trace_id}
    assert all(s.parent is not None for s in after)
    # ... the rerun tool call is a child of its round's generation: its task, kept in
    # memory, was lost with the process and created again by the generation's ``tools``
    # phase (docs/design.md, "Tasks kept in memory"); the next round is the same
    # generation task's (one task makes every round of a run): a child of the run's
    # root, as the first round was.
    phase = _one(after, "perdure.tool execute")
    tools = _one(after, "perdure.generation tools")
    assert _parent_of(phase) == tools.context.span_id
    assert _parent_of(tools) == root.context.span_id
    assert _parent_of(_one(after, "tool search")) == phase.context.span_id
    next_round = _one(after, "perdure.generation request")
    assert _parent_of(next_round) == _parent_of(request) == root.context.span_id


async def test_tasks_kept_without_a_trace_context_still_run_traced_after_a_restart(
    tmp_path: Path,
) -> None:
    """Backward compatible: a task written with no trace context (tracing was off, or by
    a version that kept none) is recovered under tracing; its spans begin a new trace."""
    exporter, tracer = _exporting()
    gate = asyncio.Event()

    async def search(args: Args, ctx: ToolContext) -> str:
        await gate.wait()
        return "found"

    rig = Rig(
        tmp_path,
        "sqlite",
        steps=[faux_message(faux_tool_call("search", {}, id="c1")), faux_message("done")],
    )
    rig.registry.install(extension("travel", tool("search", search, replay="safe")))
    h = await rig.open()  # NO_TELEMETRY: nothing kept
    sub = await (await h.root(agent={"model": MODEL, "tools": ["search"]})).submit("find")
    await until(lambda: any(t.kind == "perdure.tool" for t in h.session.tasks.values()))
    assert all(not t.memos for t in h.session.tasks.values())
    await rig.crash(h)

    gate.set()
    rig.telemetry = HostTelemetry("actor-r", tracer)
    h = await rig.open()
    assert (await (await h.submission(sub.id)).wait()).status == "done"  # type: ignore[union-attr]
    await h.close()
    spans = list(exporter.get_finished_spans())
    assert _one(spans, "tool search").parent is not None
    # The tool call, kept in memory, is created again after the restart by the untraced
    # generation: under tracing now, it begins a trace of its own.
    began = _one(spans, "perdure.tool")
    assert began.parent is None
    assert _parent_of(_one(spans, "perdure.tool execute")) == began.context.span_id


async def test_each_abort_path_is_a_log_line_saying_what_was_aborted(tmp_path: Path) -> None:
    logs = io.StringIO()
    configure_logging("json", logs)
    rig = Rig(tmp_path)
    rig.telemetry = HostTelemetry("actor-a")
    try:
        h = await rig.open()
        root = await h.root(agent={"model": MODEL})
        reminder = (await root.remind("stretch", after=60)).task
        await h.cancel_reminder(reminder)
        await h.close()
    finally:
        logging.getLogger(LOGGER).handlers.clear()
    (line,) = [json.loads(x) for x in logs.getvalue().splitlines() if '"abort"' in x]
    assert line["message"] == f"actor-a/1: reminder {reminder} cancelled"
    assert (line["scope"], line["task"], line["task_kind"]) == ("timer", reminder, "reminder")
    # The other paths, as the same sentence the chat and the log show.
    said = [
        describe_event({"kind": "abort", "scope": "conversation", "tasks": 2, "background": True}),
        describe_event(
            {"kind": "abort", "scope": "submission", "submission": 7, "withdrawn": True}
        ),
        describe_event(
            {
                "kind": "abort",
                "scope": "submission",
                "submission": 7,
                "task": 9,
                "task_kind": "generation",
            }
        ),
        describe_event({"kind": "abort", "scope": "task", "task": 12, "tool": "bash"}),
        describe_event({"kind": "abort", "scope": "schedule", "task": 4, "tasks": 1}),
    ]
    assert said == [
        "conversation aborted: 2 task(s), background work too",
        "submission 7 withdrawn before it started",
        "submission 7 aborted: its run (generation task 9)",
        "bash task 12 aborted",
        "schedule 4 cancelled",
    ]
