"""The served OpenAPI document, made to say what the server enforces.

FastAPI derives the document from the routes and models; two things it cannot know are
added here: errors are always JSON (also on the watch, whose 200 is an event stream),
and the tool and extension names an agent may name are the installed ones.
"""

from __future__ import annotations

from typing import Any

from core.harness import Registry

__all__ = ["complete_openapi"]

_ERROR = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}


def complete_openapi(spec: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """``spec`` (changed in place and returned) with every 4xx/5xx answer documented as
    JSON ``ErrorResponse`` and ``AgentChange.tools`` / ``.extensions`` limited to the
    names installed in ``registry`` when the document is built."""
    for operations in spec.get("paths", {}).values():
        for operation in operations.values():
            for status, response in operation.get("responses", {}).items():
                if str(status)[:1] in ("4", "5"):
                    response["content"] = dict(_ERROR)
    change = spec.get("components", {}).get("schemas", {}).get("AgentChange")
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
