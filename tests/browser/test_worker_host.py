"""The web inspector in Chromium against the Cloudflare host: the Worker directory
``infra/cloudflare/build.py`` builds, booted in real Pyodide under Node with only that
directory on the path (``tests/pyodide/deployed/http_server.py``) and served over HTTP
by a small Node listener that hands each request to the entry's front door. The page,
its files and the API all come through ``Default.fetch``: the files from the bundle's
package data, the API through the Durable Object stand-in, the watch's SSE streamed by
the SDK's ASGI bridge. What is a stand-in: the Durable Object's state (SQLite through
better-sqlite3) and the HTTP listener (workerd's own is not run here).

``PERDURE_WORKER_DIR`` names a directory built already (``.ci/run`` builds
``infra/cloudflare/dist``); without it the test builds one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.browser.support import CHROMIUM, free_port, wait_for
from tests.local.support import ROOT
from tests.models.fake_openai import FakeOpenAI, Stream, finish, text, usage

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - the suite needs it; a clear failure, not a skip
    pytest.fail("the browser suite needs playwright (pip install '.[test]')", pytrace=False)

TOKEN = "worker-browser-token-0123456789"
PYODIDE = ROOT / "tests" / "pyodide"


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def worker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("PERDURE_WORKER_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("worker") / "dist"
    build = _load("perdure_worker_build", ROOT / "infra" / "cloudflare" / "build.py")
    build.build(out)  # type: ignore[attr-defined]
    return out


@pytest.fixture(scope="module")
def worker_url(
    worker_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, FakeOpenAI]]:
    from tests.pyodide.run import install_node_packages

    install_node_packages()
    model = FakeOpenAI()
    model.start()
    scratch = tmp_path_factory.mktemp("scratch")
    port = free_port()
    options = {
        "bundle": str(worker_dir.resolve()),
        "checks": str(PYODIDE / "deployed"),
        "scratch": str(scratch),
        "openai_base_url": model.base_url,
        "token": TOKEN,
        "port": port,
    }
    log = (scratch / "pyodide.log").open("w")
    proc = subprocess.Popen(
        ["node", str(PYODIDE / "runner.mjs"), str(ROOT), "-", "http_server", json.dumps(options)],
        cwd=PYODIDE,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the Pyodide server exited; see {scratch / 'pyodide.log'}")
            return httpx.get(f"{url}/ui", timeout=2).status_code == 200

        wait_for("the Worker in Pyodide", up, timeout=180)
        yield url, model
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        model.stop()


def test_the_inspector_against_the_worker_in_pyodide(
    worker_url: tuple[str, FakeOpenAI], tmp_path: Path
) -> None:
    url, model = worker_url
    words = ["Hello ", "from ", "the ", "Durable ", "Object."]
    model.script(Stream([*(text(w) for w in words), usage(12, 5), finish("stop")], delay=0.2))
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)", pytrace=False)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_context(viewport={"width": 800, "height": 900}).new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(f"{url}/")  # the bare address leads to the page
            expect(page.locator("#login")).to_be_visible()
            page.fill("#token", TOKEN)
            page.click("#connect")
            expect(page.locator("#main")).to_be_visible()
            page.fill("#open-actor", "edge")
            page.click("#open-actor-form button")
            page.fill("#input", "hello edge")
            page.click("#submit")
            answer = page.locator("#transcript li[data-kind='assistant']")
            expect(answer).to_contain_text("Hello from the Durable Object.", timeout=60_000)
            expect(page.locator("#connection")).to_have_attribute("data-state", "online")
            shots = Path(os.environ.get("PERDURE_CI_ARTIFACTS", tmp_path)) / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "worker-host-800.png"), full_page=True)
            print(f"screenshot: {shots / 'worker-host-800.png'}")
        finally:
            browser.close()
    assert errors == [], errors


def test_the_client_script_against_the_worker_in_pyodide(
    worker_url: tuple[str, FakeOpenAI],
) -> None:
    """The kit's client script (``runtimes.client``) over real HTTP against the deployed
    Worker: submit, poll by id, the watch streamed as SSE, the answer read back."""
    import asyncio

    from runtimes.actor.testing import client_script
    from runtimes.client import ActorClient

    url, model = worker_url
    model.script(Stream([text("echo: hello"), usage(3, 2), finish("stop")]))

    async def run() -> str:
        async with ActorClient(url, TOKEN) as client:
            return await client_script(client, "edge-client", "edge-client-1")

    assert asyncio.run(run()) == "sse"
