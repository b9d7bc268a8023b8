"""The served OpenAPI document, made to say what the server enforces.

FastAPI derives the document from the routes and models; what it cannot know is added
here: the ``/v1/`` routes take a bearer token, and each needs a right of a scoped token
(``x-perdure-right``, from :data:`~runtimes.actor.scopes.ROUTE_RIGHTS`) — the
:class:`~runtimes.actor.api.middleware.BearerAuth` middleware enforces both before
routing (documenting it here instead of with a per-request FastAPI dependency keeps that
dependency's resolution off every request); errors are always JSON (also on the watch,
whose 200 is an event stream), the tool and extension names an agent may name are the
installed ones, and a tagged union's tag is required.
"""

from __future__ import annotations

from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.openapi.models import Schema
from pydantic.json_schema import GenerateJsonSchema

from core.harness import Registry
from runtimes.actor.api.schemas import ErrorResponse
from runtimes.actor.scopes import ROUTE_RIGHTS

__all__ = ["AUTH_PREFIX", "BEARER_SCHEME", "complete_openapi"]

_REF_TEMPLATE = "#/components/schemas/{model}"
_ERROR = {"application/json": {"schema": {"$ref": _REF_TEMPLATE.format(model="ErrorResponse")}}}

AUTH_PREFIX = "/v1/"
"""The paths the bearer token guards (the middleware's prefix)."""

BEARER_SCHEME = "HTTPBearer"
"""The security scheme's name in the document (the one FastAPI's ``HTTPBearer`` gives)."""


def complete_openapi(spec: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """``spec`` (changed in place and returned) with the bearer scheme on every operation
    under :data:`AUTH_PREFIX`, every 4xx/5xx answer documented as JSON ``ErrorResponse``
    and ``AgentChange.tools`` / ``.extensions`` limited to the names installed in
    ``registry`` when the document is built."""
    components = spec.setdefault("components", {})
    components.setdefault("securitySchemes", {})[BEARER_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "description": "the host's API token (every route), or a scoped token: one actor, "
        "a right (read, submit, admin) and an expiry; x-perdure-right says what each "
        "operation needs",
    }
    for path, operations in spec.get("paths", {}).items():
        for method, operation in operations.items():
            if path.startswith(AUTH_PREFIX):
                operation["security"] = [{BEARER_SCHEME: []}]
                need = ROUTE_RIGHTS.get((method.upper(), path))
                if need is not None:
                    operation["x-perdure-right"] = need
            for status, response in operation.get("responses", {}).items():
                if str(status)[:1] in ("4", "5"):
                    response["content"] = dict(_ERROR)
    schemas = _with_error_schemas(components.get("schemas", {}))
    components["schemas"] = schemas
    _require_discriminators(spec, schemas)
    change = schemas.get("AgentChange")
    if change is not None:
        installed = {
            "tools": sorted(registry.tool_names()),
            "extensions": sorted(e.name for e in registry.extensions),
        }
        for field, names in installed.items():
            for option in change["properties"][field].get("anyOf", []):
                if option.get("type") == "array":
                    if names:
                        option["items"] = {"type": "string", "enum": names}
                    else:
                        option["maxItems"] = 0
    return spec


def _with_error_schemas(schemas: dict[str, Any]) -> dict[str, Any]:
    """``schemas`` with ``ErrorResponse`` and what it refers to, in FastAPI's order (by
    name). The routes document their errors without a response model (see
    ``routes._ERRORS``: a model costs a pydantic field per route and status when an app
    first routes), so FastAPI does not derive these; they are derived here as FastAPI
    would, as a response (serialization) schema."""
    generator = GenerateJsonSchema(ref_template=_REF_TEMPLATE)
    _, found = generator.generate_definitions(
        [(ErrorResponse, "serialization", ErrorResponse.__pydantic_core_schema__)]
    )
    # Through FastAPI's own model of a schema, as FastAPI passes the whole document.
    merged: dict[str, Any] = {
        str(name): jsonable_encoder(Schema(**schema), by_alias=True, exclude_none=True)
        for name, schema in found.items()
    }
    merged.update(schemas)
    return {name: merged[name] for name in sorted(merged)}


def _require_discriminators(node: Any, schemas: dict[str, Any]) -> None:
    """A tagged union's tag is required in every member it maps to: the server cannot
    pick a member without it (a member's default for its own tag does not help)."""
    if isinstance(node, dict):
        discriminator = node.get("discriminator")
        if isinstance(discriminator, dict):
            tag = discriminator.get("propertyName")
            for ref in dict(discriminator.get("mapping", {})).values():
                member = schemas.get(str(ref).rsplit("/", 1)[-1])
                if member is not None and tag not in member.setdefault("required", []):
                    member["required"].append(tag)
        for value in node.values():
            _require_discriminators(value, schemas)
    elif isinstance(node, list):
        for value in node:
            _require_discriminators(value, schemas)
