"""The actor HTTP API (docs/design.md § The HTTP API): one FastAPI app over any
:class:`~runtimes.actor.Host`."""

from runtimes.actor.api.app import ApiConfig, create_app, new_api_token

__all__ = ["ApiConfig", "create_app", "new_api_token"]
