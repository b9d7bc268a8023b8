"""What every actor of a deployed function is opened with when the deployment brings no
settings factory of its own: one OpenAI-compatible model over httpx, the reminders tool
and, with a sandbox, the coding tools on the actor's own workspace.

The httpx adapter (:class:`~runtimes.models.OpenAICompatibleModels`) rather than litellm:
litellm and its dependencies alone are larger than Lambda's 250 MB limit for a function's
unzipped code, and every major provider serves an OpenAI-compatible endpoint.
"""

from __future__ import annotations

from runtimes.actor.config import ActorConfig
from runtimes.aws.config import ModelConfig

__all__ = ["default_actor_config"]


def default_actor_config(
    model: ModelConfig, api_key: str, sandbox: tuple[str, bytes] | None = None
) -> ActorConfig:
    """``sandbox``: the sandbox server's URL and the secret its workspace tokens are
    minted from (:func:`runtimes.actor.sandbox.sandbox_env`)."""
    from core.harness import Extension, ModelInfo, reminders_extension
    from core.jsonvalue import JsonObject
    from core.tools import coding_tools
    from runtimes.actor.sandbox import sandbox_env
    from runtimes.models.openai_http import OpenAICompatibleModels, OpenAIModel

    info = ModelInfo(model.name, context_window=model.context_window, max_tokens=model.max_tokens)
    route = OpenAIModel(info=info, base_url=model.base_url, api_key=api_key)
    reminders = reminders_extension()
    extensions: list[Extension] = [reminders]
    agent: JsonObject = {"model": info.id}
    env = None
    if sandbox is not None:
        tools = coding_tools()
        extensions.append(tools)
        agent["tools"] = [t.name for t in (*tools.tools, *reminders.tools)]
        env = sandbox_env(*sandbox)
    return ActorConfig(
        models=OpenAICompatibleModels({info.id: route}),
        extensions=extensions,
        env=env,
        default_agent=agent,
    )
