"""The Worker's configuration from its vars and secrets, and the actors it opens.

The end-to-end case runs a Durable Object actor configured from nothing but an ``env``:
the OpenAI-compatible adapter against a real streaming server on 127.0.0.1 and the
coding tools on a real sandbox server (a subprocess), reached with workspace tokens
minted from the sandbox secret the ``env`` holds.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from core.testing.clock import VirtualClock
from runtimes.cloudflare import names
from runtimes.cloudflare.actor import DurableActor
from runtimes.cloudflare.settings import (
    DEFAULT_MAX_BODY_BYTES,
    MisconfiguredWorker,
    WorkerSettings,
    default_actor_config,
)
from tests.cloudflare.standin import DurableObjectHome
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, tool_call
from tests.remote_env.support import SECRET, server_process

TOKEN = "worker-api-token-0123456789"


def _env(**values: Any) -> SimpleNamespace:
    base = {
        names.API_TOKEN_SECRET: TOKEN,
        names.MODEL_VAR: "gpt-test",
        names.MODEL_BASE_URL_VAR: "https://models.example/v1",
        names.MODEL_API_KEY_SECRET: "sk-model-key",
    }
    base.update(values)
    return SimpleNamespace(**{k: v for k, v in base.items() if v is not None})


def test_a_complete_env_is_read_and_secrets_stay_out_of_reprs() -> None:
    env = _env(
        **{
            names.MAX_BODY_BYTES_VAR: "2048",
            names.MODEL_CONTEXT_WINDOW_VAR: "32000",
            names.MODEL_MAX_TOKENS_VAR: "1000",
            names.SANDBOX_URL_VAR: "https://sandbox.example",
            names.SANDBOX_SECRET: "s" * 32,
        }
    )
    settings = WorkerSettings.from_env(env)
    assert settings.api_token == TOKEN and settings.max_body_bytes == 2048
    assert settings.model is not None
    assert (settings.model.name, settings.model.base_url) == (
        "gpt-test",
        env.PERDURE_MODEL_BASE_URL,
    )
    assert (settings.model.context_window, settings.model.max_tokens) == (32000, 1000)
    assert settings.sandbox is not None and settings.sandbox.secret == b"s" * 32
    shown = repr(settings)
    for secret in (TOKEN, "sk-model-key", "s" * 32):
        assert secret not in shown


def test_defaults_apply_and_no_sandbox_means_no_coding_tools() -> None:
    settings = WorkerSettings.from_env(_env())
    assert settings.max_body_bytes == DEFAULT_MAX_BODY_BYTES and settings.sandbox is None
    config = default_actor_config(settings, make_transport=httpx.AsyncHTTPTransport)
    assert [e.name for e in config.extensions] == ["perdure.reminders"]
    assert config.env is None and config.default_agent == {"model": "gpt-test"}


def test_every_missing_name_is_reported_at_once() -> None:
    with pytest.raises(MisconfiguredWorker) as caught:
        WorkerSettings.from_env(SimpleNamespace())
    problems = "\n".join(caught.value.problems)
    for name in (
        names.API_TOKEN_SECRET,
        names.MODEL_VAR,
        names.MODEL_BASE_URL_VAR,
        names.MODEL_API_KEY_SECRET,
    ):
        assert name in problems
    assert len(caught.value.problems) == 4


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({names.API_TOKEN_SECRET: "short"}, names.API_TOKEN_SECRET),
        ({names.MAX_BODY_BYTES_VAR: "lots"}, names.MAX_BODY_BYTES_VAR),
        ({names.MODEL_BASE_URL_VAR: "ftp://models.example"}, names.MODEL_BASE_URL_VAR),
        ({names.MODEL_BASE_URL_VAR: "http://models.example/v1"}, names.MODEL_BASE_URL_VAR),
        ({names.MODEL_MAX_TOKENS_VAR: "999999999"}, names.MODEL_MAX_TOKENS_VAR),
        ({names.SANDBOX_URL_VAR: "https://sandbox.example"}, names.SANDBOX_SECRET),
        ({names.SANDBOX_SECRET: "s" * 32}, names.SANDBOX_URL_VAR),
        (
            {names.SANDBOX_URL_VAR: "http://sandbox.example", names.SANDBOX_SECRET: "s" * 32},
            names.SANDBOX_URL_VAR,  # the token would cross the internet in the clear
        ),
        (
            {names.SANDBOX_URL_VAR: "https://sandbox.example", names.SANDBOX_SECRET: "short"},
            names.SANDBOX_SECRET,
        ),
    ],
)
def test_invalid_values_are_refused_by_name(values: dict[str, str], named: str) -> None:
    with pytest.raises(MisconfiguredWorker) as caught:
        WorkerSettings.from_env(_env(**values))
    assert len(caught.value.problems) == 1 and named in caught.value.problems[0]


def test_models_configured_in_code_need_no_model_vars() -> None:
    settings = WorkerSettings.from_env(SimpleNamespace(PERDURE_API_TOKEN=TOKEN), need_model=False)
    assert settings.model is None


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
