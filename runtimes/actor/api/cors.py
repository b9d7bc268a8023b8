"""The app's CORS allow-list (the policy: :mod:`runtimes.actor.cors`), through Starlette's
``CORSMiddleware``."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from runtimes.actor.cors import (
    ALLOWED_HEADERS,
    ALLOWED_METHODS,
    EXPOSED_HEADERS,
    MAX_AGE_S,
    check_origins,
)

__all__ = ["add_cors"]


def add_cors(app: FastAPI, origins: Sequence[str]) -> None:
    """Answer preflights and tag answers for ``origins`` (add it outermost: a preflight
    carries no token, and a page must be able to read a refusal too)."""
    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(check_origins(origins)),
        allow_methods=list(ALLOWED_METHODS),
        allow_headers=list(ALLOWED_HEADERS),
        expose_headers=list(EXPOSED_HEADERS),
        allow_credentials=False,
        max_age=MAX_AGE_S,
    )
