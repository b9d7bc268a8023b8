"""An actor opened from nothing but a Worker ``env``, against real servers (CPython only:
the servers are a uvicorn thread and a subprocess; the Pyodide suite runs the same
through ``fetch`` as ``durable_object_configured_from_env``).

The OpenAI-compatible adapter talks to a real streaming server on 127.0.0.1 and the
coding tools to a real sandbox server, reached with workspace tokens minted from the
sandbox secret the ``env`` holds.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx

from core.testing.clock import VirtualClock
from runtimes.cloudflare import names
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.settings import WorkerSettings, default_actor_config
from tests.cloudflare.standin import DurableObjectHome
from tests.cloudflare.test_settings import _env
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call
from tests.remote_env.support import SECRET, server_process


async def test_an_actor_configured_from_env_reaches_the_model_and_its_sandbox_workspace(
    tmp_path: Path,
) -> None:
    """Model asks for ``bash`` → the command runs in the actor's own workspace on the
    sandbox server (token minted from the env's secret) → the model answers."""
    model = FakeOpenAI()
    model.start()
    home = DurableObjectHome(tmp_path / "do.sqlite")
    try:
        with server_process(tmp_path) as sandbox:
            command = json.dumps({"command": "echo from-the-worker > note.txt; cat note.txt"})
            model.script(
                Stream(
                    [
                        tool_call(0, id="call_1", name="bash", arguments=command),
                        finish("tool_calls"),
                    ]
                ),
                Stream([text("wrote the note"), finish("stop")]),
            )
            env = _env(
                **{
                    names.MODEL_BASE_URL_VAR: model.base_url,  # http, but loopback
                    names.SANDBOX_URL_VAR: sandbox.url,
                    names.SANDBOX_SECRET: SECRET.decode(),
                }
            )
            config = default_actor_config(
                WorkerSettings.from_env(env), make_transport=httpx.AsyncHTTPTransport
            )
            actor = DurableActor(
                home.open(),
                config,
                clock=VirtualClock(),
                alarm_report=lambda r: None,
                actor="tree-env",
            )
            try:
                async with actor.serving() as harness:
                    root = await harness.root(agent=dict(config.default_agent))
                    record = await (await root.submit("write a note")).wait()
                assert record.status == "done", record
                assert (sandbox.root / "tree-env" / "note.txt").read_text() == "from-the-worker\n"
                second = model.received[1].body
                results = [m for m in second["messages"] if m["role"] == "tool"]
                assert results and "from-the-worker" in results[0]["content"], results
                assert model.received[0].headers["authorization"] == "Bearer sk-model-key"
            finally:
                with contextlib.suppress(Exception):
                    await config.models.aclose()  # type: ignore[attr-defined]
                await actor.close()
    finally:
        model.stop()
        home.close()
