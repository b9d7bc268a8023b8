"""What is specific to the litellm adapter: its price map, its configuration, and how
importing litellm behaves (offline, quiet, no warnings, no ``.env`` loading)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.harness.models import ModelInfo, StreamDone
from core.tasks.signal import CancelSignal
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage
from tests.models.support import INFO, MODEL_ID, Subject, collect, collect_until_error, request

ROOT = Path(__file__).resolve().parents[2]


async def test_cost_from_litellms_price_map(server: FakeOpenAI) -> None:
    import litellm

    server.script(Stream([text("ok"), finish("stop"), usage(1000, 500, cached=400)]))
    subject = Subject("litellm", server)
    async with subject.models(litellm_model="openai/gpt-4o-mini") as models:
        events = await collect(models.stream(request(), CancelSignal()))
    final = events[-1]
    assert isinstance(final, StreamDone)
    prices = litellm.model_cost["gpt-4o-mini"]
    expected = (
        600 * prices["input_cost_per_token"]
        + 400 * prices["cache_read_input_token_cost"]
        + 500 * prices["output_cost_per_token"]
    )
    assert final.message.usage.cost == pytest.approx(expected)
    assert final.message.usage.cost > 0


async def test_unknown_model_without_prices_costs_nothing(server: FakeOpenAI) -> None:
    server.script(Stream([text("ok"), finish("stop"), usage(10, 5)]))
    async with Subject("litellm", server).models() as models:
        events = await collect(models.stream(request(), CancelSignal()))
    final = events[-1]
    assert isinstance(final, StreamDone) and final.message.usage.cost == 0.0


async def test_timeout_option_is_validated(server: FakeOpenAI) -> None:
    async with Subject("litellm", server).models() as models:
        _, error = await collect_until_error(
            models.stream(request(options={"timeout": "soon"}), CancelSignal())
        )
    assert error is not None and "timeout" in str(error)
    assert server.received == []


def test_configuration_is_validated() -> None:
    from runtimes.models.litellm import LitellmModel, LitellmModels

    with pytest.raises(ValueError, match="may not set"):
        LitellmModel(info=INFO, extra={"api_base": "http://elsewhere"})
    with pytest.raises(ValueError, match="described by"):
        LitellmModels({"other": INFO})
    with pytest.raises(ValueError, match="positive"):
        LitellmModels({"m": ModelInfo(id="m", context_window=10, max_tokens=-1)})
    assert "sk-secret" not in repr(LitellmModel(info=INFO, api_key="sk-secret"))
    models = LitellmModels({MODEL_ID: INFO})
    assert models.info(MODEL_ID) == INFO


_PROBE = textwrap.dedent(
    """
    import asyncio, json, os, sys

    connections = []

    def audit(event, args):
        if event in ("socket.connect", "socket.getaddrinfo"):
            connections.append(repr(args))

    sys.addaudithook(audit)

    from core.harness.messages import UserMessage
    from core.harness.models import ModelInfo, ModelRequest
    from core.tasks.signal import CancelSignal
    from runtimes.models.litellm import LitellmModel, LitellmModels, close_litellm_clients

    async def main():
        url = sys.argv[1]
        models = LitellmModels({
            "known": LitellmModel(
                info=ModelInfo(id="known", context_window=1000, max_tokens=100),
                model="openai/gpt-4o-mini", api_base=url, api_key="k",
            ),
        })
        req = ModelRequest(model="known", messages=[UserMessage(content="hi")], thinking="high")
        costs = []
        for _ in range(2):  # with a usage chunk, then without (litellm estimates)
            async for event in models.stream(req, CancelSignal()):
                pass
            costs.append(event.message.usage.cost)
        await close_litellm_clients()
        return costs

    costs = asyncio.run(main())
    report = {
        "costs": costs,
        "remote": [c for c in connections if "127.0.0.1" not in c],
        "env": {k: os.environ.get(k) for k in (
            "LITELLM_LOCAL_MODEL_COST_MAP", "LITELLM_MODE", "PERDURE_DOTENV_PROBE")},
    }
    sys.stderr.write("REPORT " + json.dumps(report))
    """
)


def test_import_and_use_are_offline_quiet_and_warning_free(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    server.script(
        Stream([text("a"), finish("stop"), usage(10, 5)]),
        Stream([text("b"), finish("stop")]),
    )
    (tmp_path / ".env").write_text("PERDURE_DOTENV_PROBE=loaded\n")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("LITELLM_") and k != "PERDURE_DOTENV_PROBE"
    }
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", _PROBE, server.base_url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", "litellm printed to stdout"
    prefix, _, raw = proc.stderr.rpartition("REPORT ")
    assert prefix == "", f"unexpected stderr output: {prefix}"
    report = json.loads(raw)
    assert report["remote"] == [], "litellm tried to reach the network"
    assert report["env"] == {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_MODE": "PRODUCTION",
        "PERDURE_DOTENV_PROBE": None,
    }
    assert all(cost > 0 for cost in report["costs"])
    # reasoning_effort is dropped for a model litellm knows cannot take it.
    assert all("reasoning_effort" not in r.body for r in server.received)
