"""perdure's remote execution environment: a sandbox server and an ``ExecutionEnv`` client.

``remote_env.server`` runs on the sandbox host; ``remote_env.client`` is what a harness uses.
The two share only ``remote_env.protocol`` (wire models) and ``remote_env.auth`` (tokens).
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
