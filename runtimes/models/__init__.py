"""Model adapters: the :class:`core.harness.models.Models` port for real providers.

* :class:`LitellmModels` (``runtimes.models.litellm``): any provider litellm supports,
  on CPython hosts;
* :class:`OpenAICompatibleModels` (``runtimes.models.openai_http``): any OpenAI-compatible
  chat completions endpoint over plain httpx, for Workers where litellm cannot run;
* :class:`ModelRouter`: several adapters behind one, by model-id prefix.

The litellm names are imported lazily, on first access: importing litellm is slow, has
process-wide side effects (see ``runtimes.models.litellm``), and litellm is not installed
on Workers, where only the httpx adapter is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtimes.models._wire import DEFAULT_OPTIONS
from runtimes.models.openai_http import OpenAICompatibleModels, OpenAIModel
from runtimes.models.pricing import Pricing
from runtimes.models.router import ModelRouter

if TYPE_CHECKING:
    from runtimes.models.litellm import LitellmModel, LitellmModels, close_litellm_clients

__all__ = [
    "DEFAULT_OPTIONS",
    "LitellmModel",
    "LitellmModels",
    "ModelRouter",
    "OpenAICompatibleModels",
    "OpenAIModel",
    "Pricing",
    "close_litellm_clients",
]

_LAZY = frozenset({"LitellmModel", "LitellmModels", "close_litellm_clients"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from runtimes.models import litellm as _litellm

        return getattr(_litellm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
