"""The harness side: :class:`RemoteEnv` implements ``core.env.ExecutionEnv`` over HTTP."""

from __future__ import annotations

from remote_env.client.env import RemoteEnv as RemoteEnv
from remote_env.client.retry import RetryPolicy as RetryPolicy

__all__ = ["RemoteEnv", "RetryPolicy"]
