"""System prompt planning: render sections, record only what changed.

The prompt is a list of keyed sections (extensions' sections in order, then the agent's
own ``instructions``). What the model has been told is recorded in the transcript as
``system`` entries: a *baseline* with every section when a context range starts, then
*deltas* carrying only the sections that changed. Recording deltas instead of a new
prompt keeps the earlier transcript — and provider prompt caches — valid.
"""

from __future__ import annotations

import inspect

from core.harness.registry import ResolvedAgent, SectionContext
from core.jsonvalue import JsonObject
from core.readonly import readonly

__all__ = ["PromptChange", "plan_prompt", "render_sections"]


@readonly(slots=False)
class PromptChange:
    """A system entry to append: its text and the recorded section map."""

    text: str
    data: JsonObject


async def render_sections(agent: ResolvedAgent, ctx: SectionContext) -> dict[str, str]:
    rendered: dict[str, str] = {}
    for sec in agent.sections:
        produced = sec.render(ctx)
        text = await produced if inspect.isawaitable(produced) else produced
        if text is None:
            continue
        rendered[sec.key] = f"<{sec.tag}>\n{text}\n</{sec.tag}>" if sec.tag else str(text)
    if agent.instructions:
        rendered["instructions"] = agent.instructions
    return rendered


def plan_prompt(
    told: dict[str, str], wanted: dict[str, str], *, baseline: bool
) -> PromptChange | None:
    """The system entry that brings ``told`` to ``wanted`` (``None`` if nothing changed).

    ``baseline`` forces a complete prompt (a new context range starts).
    """
    if baseline:
        if not wanted:
            return None
        return PromptChange(
            "\n\n".join(wanted.values()), {"sections": dict(wanted), "baseline": True}
        )
    changed = {k: v for k, v in wanted.items() if told.get(k) != v}
    removed = [k for k in told if k not in wanted]
    if not changed and not removed:
        return None
    lines = ["The system prompt has changed."]
    for key, text in changed.items():
        lines.append(f"Section {key}{' (new)' if key not in told else ''}:\n{text}")
    for key in removed:
        lines.append(f"Section {key} no longer applies.")
    sections: JsonObject = {**changed, **dict.fromkeys(removed)}
    return PromptChange("\n\n".join(lines), {"sections": sections})
