"""How many commits a tool round takes (issue 14), and that the shortcuts keep the rules.

A round's structural commits — those that write entries or tasks — are: the round
commit (assistant entry, tool tasks, the generation waiting), for an unsafe tool its
intent, and the last result, which also hands the run over to the next generation.
A safe tool's intent rides in the round commit (invariant 4 still holds: the intent
is stored before the tool runs). Streaming progress commits (``live`` only) come on
top and depend on how long the response streams.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.faux import faux_message, faux_tool_call
from core.harness import ToolContext
from core.harness.registry import Hooks
from core.session import CommitEvent
from tests.core.harness.support import MODEL, Args, Rig, extension, tool


async def _structural_commits_per_round(
    tmp_path: Path, replay: str, rounds: int = 4, **ext: Any
) -> tuple[float, list[Any]]:
    seen: list[Any] = []

    async def look(args: Args, ctx: ToolContext) -> str:
        stored = await ctx.harness.session.storage.task(ctx.task_id)
        seen.append(stored.checkpoint if stored else None)
        return "r" * 2048

    steps = [
        faux_message("thinking", faux_tool_call("look", {"text": f"p{i}"}, id=f"c{i}"))
        for i in range(rounds)
    ]
    rig = Rig(tmp_path, "sqlite", steps=[*steps, faux_message("done")])
    rig.registry.install(extension("look", tool("look", look, replay=replay), **ext))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    structural = 0

    def count(event: CommitEvent) -> None:
        nonlocal structural
        if event.entries or event.tasks:
            structural += 1

    h.session.subscribe(count)
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    await h.close()
    # Not rounds: the submission, the first generation's reservation (scheduling starts
    # with the wait) and its prepare, and the answer.
    return (structural - 4) / rounds, seen


async def test_a_safe_tool_round_takes_two_commits(tmp_path: Path) -> None:
    per_round, seen = await _structural_commits_per_round(tmp_path, "safe")
    assert per_round == 2
    # Invariant 4: what a fresh process would find while the tool runs is its intent.
    assert seen[0] == {
        "phase": "execute",
        "arguments": {"text": "p0"},
        "replay": "safe",
        "attempt": 1,
    }


async def test_an_unsafe_tool_round_takes_three_commits(tmp_path: Path) -> None:
    per_round, seen = await _structural_commits_per_round(tmp_path, "unsafe")
    assert per_round == 3
    assert seen[0] == {
        "phase": "execute",
        "arguments": {"text": "p0"},
        "replay": "unsafe",
        "attempt": 1,
    }


@pytest.mark.parametrize("rewrite", [False, True])
async def test_a_before_tool_hook_keeps_the_intent_commit_of_a_safe_tool(
    tmp_path: Path, rewrite: bool
) -> None:
    """Hooks may block or rewrite a call and recovery does not rerun them, so with
    hooks the intent is committed after them, with the final arguments."""

    async def before(call: Any, ctx: ToolContext) -> Any:
        return {"text": "rewritten"} if rewrite else None

    per_round, seen = await _structural_commits_per_round(
        tmp_path, "safe", hooks=Hooks(before_tool=before)
    )
    assert per_round == 3
    text = "rewritten" if rewrite else "p0"
    assert seen[0] == {
        "phase": "execute",
        "arguments": {"text": text},
        "replay": "safe",
        "attempt": 1,
    }
