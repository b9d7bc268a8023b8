"""The actor API's routes as plain data, for a front door that decides before the app.

The Cloudflare Worker routes each request to its actor's Durable Object before any app
runs, and refuses there what the app would refuse without touching the actor (so a
refusal creates no object). It learns the routes from here, so the two cannot drift
apart: every route below ``/v1/actors/{actor}`` with its method and whether it needs a
body (FastAPI answers ``422`` to an empty body there).
"""

from __future__ import annotations

from fastapi.routing import APIRoute

from runtimes.actor.api import approvals, deltas, history, routes, schedules

__all__ = ["actor_routes"]


def actor_routes() -> list[tuple[str, str, bool]]:
    """``(method, path template, needs a body)`` for every route of the actor API."""
    table: list[tuple[str, str, bool]] = []
    for router in (
        routes.router,
        history.router,
        schedules.router,
        deltas.router,
        approvals.router,
    ):
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            body = route.body_field
            needs_body = body is not None and body.field_info.is_required()
            table += [(method, route.path, needs_body) for method in sorted(route.methods or ())]
    return table
