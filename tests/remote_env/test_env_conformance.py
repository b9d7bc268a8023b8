"""The ExecutionEnv conformance kit against RemoteEnv, over ASGI in-process and over a real
uvicorn server on 127.0.0.1 (each case its own test id)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.testing.env_conformance import Case, env_cases
from tests.remote_env.support import (
    ServerProcess,
    asgi_env,
    env_factory,
    run,
    running_app,
    server_process,
    settings,
)

_CASES = env_cases()
_workspace_ids = itertools.count()


@pytest.fixture(scope="module")
def socket_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with server_process(tmp_path_factory.mktemp("conformance")) as server:
        yield server


@pytest.mark.parametrize("case", _CASES, ids=[case.name for case in _CASES])
def test_over_asgi(case: Case, tmp_path: Path) -> None:
    async def main() -> None:
        async with running_app(settings(tmp_path / "root")) as app:
            await case.run(env_factory(lambda: asgi_env(app, "conformance")))

    run(main())


@pytest.mark.parametrize("case", _CASES, ids=[case.name for case in _CASES])
def test_over_socket(case: Case, socket_server: ServerProcess) -> None:
    # One server for the module; a fresh workspace per case keeps cases independent.
    workspace = f"case-{next(_workspace_ids)}-{case.name.replace('_', '-')}"[:64]
    run(case.run(env_factory(lambda: socket_server.env(workspace))))
