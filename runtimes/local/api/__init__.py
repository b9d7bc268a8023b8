"""The actor HTTP API (SPEC §10) over a local :class:`~runtimes.local.host.ActorHost`."""

from runtimes.local.api.app import ApiConfig, create_app
from runtimes.local.api.server import HostServer, bind, make_server

__all__ = ["ApiConfig", "HostServer", "bind", "create_app", "make_server"]
