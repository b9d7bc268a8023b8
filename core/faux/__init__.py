"""The scripted model: a :class:`~core.harness.Models` adapter that answers from a script.

For tests, demos (``perdure demo``) and ``perdure dev`` without credentials; a
production component in that sense, so it lives outside :mod:`core.testing`.
"""

from core.faux.model import (
    FAUX_MODEL,
    FauxModel,
    FauxReply,
    FauxState,
    FauxStep,
    faux_block,
    faux_deferred,
    faux_error,
    faux_message,
    faux_text,
    faux_tool_call,
)

__all__ = [
    "FAUX_MODEL",
    "FauxModel",
    "FauxReply",
    "FauxState",
    "FauxStep",
    "faux_block",
    "faux_deferred",
    "faux_error",
    "faux_message",
    "faux_text",
    "faux_tool_call",
]
