"""The pages for people, over real HTTP: ``/ui`` (the inspector's files, public, locked
down by a content security policy, never a token) and ``/docs`` (Swagger UI from the
installed swagger-ui-py files: no CDN), and the schema at ``/openapi.json``."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Iterator

import httpx
import pytest

from tests.local.support import ROOT, Running, host_config, serve_in_thread

UI_DIR = ROOT / "runtimes" / "actor" / "api" / "ui"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    with serve_in_thread(host_config(tmp_path_factory.mktemp("pages") / "data")) as r:
        yield r


def test_docs_are_served_from_installed_files_without_a_cdn(running: Running) -> None:
    page = httpx.get(f"{running.url}/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in page.text
    # Every URL the page loads is this server's own.
    loaded = re.findall(r"""(?:src|href)=["']([^"']+)""", page.text)
    loaded += re.findall(r"""url:\s*['"]([^'"]+)""", page.text)
    assert loaded and all(u.startswith("/") for u in loaded), loaded
    assert "cdn." not in page.text and "https://" not in page.text
    js = httpx.get(f"{running.url}/docs/swagger-ui-bundle.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert "SwaggerUIBundle" in js.text
    css = httpx.get(f"{running.url}/docs/swagger-ui.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    other = httpx.get(f"{running.url}/docs/index.html")
    assert other.status_code == 404 and other.json()["error"]["code"] == "no_route"


def test_the_inspector_page_is_public_locked_down_and_carries_no_token(running: Running) -> None:
    page = httpx.get(f"{running.url}/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert 'id="token"' in page.text and 'type="password"' in page.text
    assert "<script>" not in page.text  # no inline script: the CSP would refuse it
    for name, kind in (("app.js", "javascript"), ("inspector.css", "text/css")):
        r = httpx.get(f"{running.url}/ui/{name}")
        assert r.status_code == 200 and kind in r.headers["content-type"], name
    # The modules import only each other, by this server's paths.
    for path in UI_DIR.glob("*.js"):
        for target in re.findall(r"""from\s+["']([^"']+)""", path.read_text()):
            assert target.startswith("/ui/") and (UI_DIR / target[4:]).is_file(), target
    for bad in ("nope.js", "..%2Fapp.py", "index.py", ".hidden.js"):
        r = httpx.get(f"{running.url}/ui/{bad}")
        assert r.status_code == 404 and r.json()["error"]["code"] == "no_route", bad
    # The data behind the page is not public.
    assert httpx.get(f"{running.url}/v1/actors").status_code == 401


def test_the_schema_has_the_listing_routes_and_not_the_pages(running: Running) -> None:
    paths = httpx.get(f"{running.url}/openapi.json").json()["paths"]
    for path in (
        "/v1/actors",
        "/v1/actors/{actor}/conversations",
        "/v1/actors/{actor}/conversations/{conversation_id}/submissions",
        "/v1/actors/{actor}/conversations/{conversation_id}/entries",
    ):
        assert "get" in paths[path], path
    assert not any(p.startswith(("/ui", "/docs")) for p in paths)


def test_every_inspector_file_is_declared_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["runtimes.actor.api"]
    files = sorted(p.name for p in UI_DIR.iterdir() if p.is_file())
    assert {"index.html", "app.js", "inspector.css"} <= set(files)
    missing = [f for f in files if not any(fnmatch.fnmatch(f"ui/{f}", g) for g in globs)]
    assert missing == [], f"not shipped by `pip install .`: {missing}"


def test_a_host_without_swagger_files_says_which_package_serves_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtimes.actor.api import webpages
    from runtimes.actor.api.errors import ApiError

    monkeypatch.setattr(webpages.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ApiError) as refused:
        webpages._swagger_dir()
    assert refused.value.status == 404 and "swagger-ui-py" in refused.value.message


def test_the_schema_documents_statuses_when_busy_and_the_delta_format(running: Running) -> None:
    spec = httpx.get(f"{running.url}/openapi.json").json()
    schemas = spec["components"]["schemas"]
    when_busy = schemas["InputSubmission"]["properties"]["when_busy"]
    assert set(when_busy["enum"]) == {"follow_up", "steer", "reject"}
    assert all(v in when_busy["description"] for v in ("`follow_up`", "`steer`", "`reject`"))
    for model in ("SubmissionState", "SubmissionAccepted", "SubmissionSummary"):
        status = schemas[model]["properties"]["status"]
        for value in ("queued", "placed", "done", "unanswered"):
            assert value in status["description"], (model, value)
    watch = spec["paths"]["/v1/actors/{actor}/conversations/{conversation_id}/watch"]["get"]
    for op in ('["s", path, value]', '["a", path, text]', '["p", path, index, count'):
        assert op in watch["description"], op
    submit = spec["paths"]["/v1/actors/{actor}/submissions"]["post"]
    assert "422 request_id_conflict" in submit["description"]
