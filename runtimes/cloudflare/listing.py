"""``GET /v1/actors`` at the Worker's front door: the page the local API answers, read
from the Worker's index of its actors (:mod:`~.index`), so no actor's Durable Object is
addressed, woken or created.

The query is checked as the app checks it (``after``: an actor id; ``limit``: 1 to
1,000, default 100; anything else ignored), with the same ``422 invalid`` answers, and
the page has the app's shape: ``{actors: [{id}], next_after}``, where ``next_after`` is
the last id of a full page when more may follow (pass it as ``after``). Only the host's
API token lists (a scoped token gets ``403``: :meth:`~.front_door.FrontDoor.admit_operator`).
No FastAPI here: the front door answers without building the app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import parse_qsl

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtimes.actor.ids import ACTOR_ID_PATTERN
from runtimes.cloudflare.front_door import FrontDoor, Refusal
from runtimes.cloudflare.index import ActorIndex

__all__ = ["LISTING_PATH", "MAX_PAGE", "list_at_door", "listing_page"]

LISTING_PATH = "/v1/actors"
MAX_PAGE = 1000  # the app's (runtimes/actor/api/history.py; a test keeps them equal)


class _Query(BaseModel):
    model_config = ConfigDict(extra="ignore")

    after: Annotated[str | None, Field(pattern=ACTOR_ID_PATTERN)] = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 100


def _invalid(error: ValidationError) -> Refusal:
    problems = []
    for problem in error.errors():
        where = ".".join(str(part) for part in problem["loc"])
        reason = str(problem["msg"])
        if reason.startswith("Input should"):  # the subject is the field, as the app says
            reason = "should" + reason[len("Input should") :]
        problems.append(f"query.{where}: {reason}")
    return Refusal(422, "invalid", "invalid request: " + "; ".join(problems))


async def listing_page(index: ActorIndex, *, after: str | None, limit: int) -> dict[str, Any]:
    """One page of the index, in the app's shape (one more id is read to tell whether
    another page follows)."""
    names = await index.names(after=after, limit=limit + 1)
    page = names[:limit]
    more = len(names) > limit
    return {"actors": [{"id": n} for n in page], "next_after": page[-1] if more else None}


async def list_at_door(
    door: FrontDoor, method: str, query: str, headers: Mapping[str, str], index: ActorIndex
) -> Refusal | dict[str, Any]:
    """The Worker's answer to ``method /v1/actors?query``: a refusal, or the page."""
    refused = door.admit_operator(method, LISTING_PATH, headers)
    if refused is not None:
        return refused
    # The last of a repeated parameter, as the app reads a query.
    params = dict(parse_qsl(query, keep_blank_values=True))
    try:
        wanted = _Query.model_validate(params)
    except ValidationError as error:
        return _invalid(error)
    return await listing_page(index, after=wanted.after, limit=wanted.limit)
