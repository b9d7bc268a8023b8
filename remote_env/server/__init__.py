"""The sandbox server: FastAPI app, settings and a uvicorn runner.

Start it with ``python -m remote_env.server --root DIR --listen HOST:PORT`` or
``remote_env.cli``'s ``sandbox`` command, or build the app with :func:`create_app`.
"""

from __future__ import annotations

from remote_env.server.app import create_app as create_app
from remote_env.server.runner import serve as serve
from remote_env.server.settings import ServerSettings as ServerSettings

__all__ = ["ServerSettings", "create_app", "serve"]
