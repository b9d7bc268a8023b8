"""The AWS clients and names the host is configured with, and the one way to call them.

boto3 clients are synchronous; every call goes through :func:`call`, which runs it on a
worker thread so a network round trip never stalls the event loop (model streams and
timers keep running while a commit waits for DynamoDB).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = ["AwsResources", "call", "error_code"]


@dataclass(frozen=True)
class AwsResources:
    """``dynamodb`` and ``s3`` are boto3 clients (``boto3.client("dynamodb")``...).

    ``table`` has a string partition key ``pk`` and a string sort key ``sk``; ``bucket``
    holds snapshots and oversized log records under ``prefix``.
    """

    dynamodb: Any
    s3: Any
    table: str
    bucket: str
    prefix: str = "actors"


async def call(method: Callable[..., Any], **kwargs: Any) -> Any:
    return await asyncio.to_thread(partial(method, **kwargs))


def error_code(error: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return code if isinstance(code, str) else None
