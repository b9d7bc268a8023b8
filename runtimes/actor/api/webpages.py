"""The pages a person opens in a browser: the web inspector (``/ui``, where the bare
address ``/`` leads) and the API docs (``/docs``, Swagger UI), both served from installed
files, never a CDN.

Neither page carries data or a token: the inspector asks for the API token on its own
page, keeps it in ``sessionStorage`` and sends it as the bearer header of its ``/v1/``
calls (which the auth middleware checks as it checks every client's). So the pages are
public and the data behind them is not.

The inspector's files and headers come from :mod:`runtimes.actor.inspector_files` (the
Cloudflare Worker serves the same without this app). Files are read once and served from
memory (no thread pool, no file handles: a Durable Object has neither). Swagger UI's
files come from the ``swagger-ui-py`` package; where it is not installed, ``/docs``
answers ``404 docs_unavailable`` naming the package, and ``/openapi.json`` still serves
the schema.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.responses import RedirectResponse, Response

from runtimes.actor.api.errors import ApiError
from runtimes.actor.inspector_files import UI_HEADERS
from runtimes.actor.inspector_files import inspector_file as read_inspector_file

__all__ = ["router"]

_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
_SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css")


@dataclass(frozen=True)
class _Asset:
    body: bytes
    media_type: str


_cache: dict[str, _Asset] = {}

router = APIRouter(include_in_schema=False)


def _ui_asset(name: str) -> _Asset:
    found = read_inspector_file(name)
    if found is None:
        raise ApiError(404, "no_route", f"no inspector file {name!r}")
    return _Asset(found.body, found.media_type)


def _swagger_asset(name: str) -> _Asset:
    key = f"docs/{name}"
    if key not in _cache:
        if name not in _SWAGGER_FILES:
            raise ApiError(404, "no_route", f"no docs file {name!r}")
        _cache[key] = _Asset((_swagger_dir() / name).read_bytes(), _TYPES[Path(name).suffix])
    return _cache[key]


def _swagger_dir() -> Path:
    # Found without importing the package (its __init__ pulls in template engines).
    spec = importlib.util.find_spec("swagger_ui")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        static = Path(location) / "static"
        if all((static / f).is_file() for f in _SWAGGER_FILES):
            return static
    raise ApiError(
        404,
        "docs_unavailable",
        "the API docs page needs the swagger-ui-py package (pip install swagger-ui-py); "
        "the schema itself is at /openapi.json",
    )


def _serve(asset: _Asset, headers: dict[str, str] | None = None) -> Response:
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get("/")
async def home() -> Response:
    """A person who opens the bare address is sent to the inspector (relative, so a
    stage prefix in front of the app is kept); the API itself lives under ``/v1/``."""
    return RedirectResponse("ui", status_code=307)


@router.get("/ui")
@router.get("/ui/")
async def inspector() -> Response:
    """The inspector's page (it asks for the token itself)."""
    return _serve(_ui_asset("index.html"), UI_HEADERS)


@router.get("/ui/{name}")
async def inspector_file(name: str) -> Response:
    return _serve(_ui_asset(name), UI_HEADERS)


@router.get("/docs")
async def docs() -> Response:
    """Swagger UI over ``/openapi.json``, from the installed files ("Authorize" takes
    the bearer token)."""
    _swagger_dir()  # a clear 404 when the package is missing, before any HTML
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="perdure actors API",
        swagger_js_url="/docs/swagger-ui-bundle.js",
        swagger_css_url="/docs/swagger-ui.css",
        swagger_favicon_url="/ui/favicon.svg",
    )


@router.get("/docs/{name}")
async def docs_file(name: str) -> Response:
    return _serve(_swagger_asset(name), {"cache-control": "max-age=3600"})
