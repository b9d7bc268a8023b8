"""The Worker's configuration from its vars and secrets (also run inside Pyodide).

``test_settings_servers.py`` opens an actor from such an ``env`` against real servers.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from runtimes.cloudflare import names
from runtimes.cloudflare.settings import (
    DEFAULT_MAX_BODY_BYTES,
    MisconfiguredWorker,
    WorkerSettings,
    default_actor_config,
)

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
