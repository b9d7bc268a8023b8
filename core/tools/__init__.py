"""Coding tools over the ExecutionEnv port: logic (``coding``) and the harness extension."""

from core.tools.extension import coding_tools

__all__ = ["coding_tools"]
