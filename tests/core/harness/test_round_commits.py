"""How many commits a tool round takes (issue 14), and that the shortcuts keep the rules.

A round's structural commits — those that write entries or tasks — are: the round commit
(assistant entry, tool tasks, the generation waiting) and the last result, which also
hands the run over to the generation's next round. The intent of a safe or unsafe tool
rides in the round commit (invariant 4 still holds: the intent is stored before the tool
runs); with ``before_tool`` hooks it is a commit of its own. Streaming progress commits
(``live`` only) come on top and depend on how long the response streams. The round whose
result crosses the background compaction threshold costs the same: the compaction starts
in its last result commit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.faux import faux_message, faux_tool_call
from core.harness import ToolContext
from core.harness.registry import Hooks
from core.session import CommitEvent
from core.storage import TaskQuery
from tests.core.harness.support import (
    MODEL,
    Args,
    Rig,
    durable_intent,
    ended_tools,
    extension,
    tool,
)


async def _structural_commits_per_round(
    tmp_path: Path, replay: str, rounds: int = 4, **ext: Any
) -> tuple[float, list[Any]]:
    seen: list[Any] = []

    async def look(args: Args, ctx: ToolContext) -> str:
        seen.append(await durable_intent(ctx))
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
    # with the wait) and the answer (its prepare commits nothing: no prompt change).
    return (structural - 3) / rounds, seen


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


async def test_an_unsafe_tool_round_takes_two_commits(tmp_path: Path) -> None:
    per_round, seen = await _structural_commits_per_round(tmp_path, "unsafe")
    assert per_round == 2
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


@pytest.mark.parametrize(("replay", "commits"), [("safe", 2), ("unsafe", 2)])
async def test_a_round_that_starts_a_background_compaction_takes_no_commit_more(
    tmp_path: Path, replay: str, commits: int
) -> None:
    """The round whose result crosses the background threshold starts the compaction in
    its last result commit, beside the hand-over: not in a hand-over of its own after a
    separate wake of the generation (two commits more, as it was)."""
    from core.harness.compaction import COMPACTION
    from core.harness.runs import GENERATION
    from tests.core.harness.test_compaction import MEDIUM, SETTINGS, SMALL, Router

    router = Router(
        answers=[
            faux_message(faux_tool_call("look", {"text": "p0"}, id="c0"), usage=MEDIUM),
            faux_message("done"),
        ],
        summaries=[faux_message("the user asked to look")],
    )
    rig = Rig(tmp_path, "sqlite", settings=SETTINGS, models=[SMALL])
    rig.faux.respond(*[router] * 10)

    async def look(args: Args, ctx: ToolContext) -> str:
        return "r" * 200

    rig.registry.install(extension("look", tool("look", look, replay=replay)))
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    structural: list[CommitEvent] = []
    h.session.subscribe(lambda e: structural.append(e) if e.entries or e.tasks else None)
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    await root.wait_for_idle()
    await h.close()

    def index(test: Any) -> int:
        return next(i for i, e in enumerate(structural) if test(e))

    answer = index(lambda e: any(x.kind == "assistant" for x in e.entries))
    started = index(lambda e: any(t.kind == COMPACTION for t in e.tasks))
    assert started - answer + 1 == commits  # the round's commits, the start included
    last = structural[started]
    assert [x.kind for x in last.entries] == ["tool_result"]
    successors = [t for t in last.tasks if t.kind == GENERATION and t.checkpoint is not None]
    assert any(t.checkpoint.get("phase") == "request" for t in successors)  # type: ignore[union-attr]


async def test_a_round_in_the_band_while_a_compaction_summarizes_starts_no_second(
    tmp_path: Path,
) -> None:
    """With a compaction in flight (noted in ``live``), the next round in the background
    band must find it and start none: telling whether it is still in flight reads its
    task, which the result commit cannot, so that round hands over from the
    generation's ``tools`` phase."""
    from core.harness import Usage
    from tests.core.harness.test_compaction import MEDIUM, SETTINGS, SMALL, Router, compactions

    released = asyncio.Event()

    async def summary(request: Any, state: Any) -> Any:
        await released.wait()  # still summarizing while round two's result commits
        return faux_message("the user asked to look")

    async def answer(request: Any, state: Any) -> Any:
        released.set()
        return faux_message("done")

    router = Router(
        answers=[
            faux_message(faux_tool_call("look", {"text": "p0"}, id="c0"), usage=MEDIUM),
            faux_message(
                faux_tool_call("look", {"text": "p1"}, id="c1"), usage=Usage(input=2600, output=100)
            ),
            answer,
        ],
        summaries=[summary],
    )
    rig = Rig(tmp_path, "sqlite", settings=SETTINGS, models=[SMALL])
    rig.faux.respond(*[router] * 10)

    async def look(args: Args, ctx: ToolContext) -> str:
        return "r" * 200

    rig.registry.install(extension("look", tool("look", look, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": SMALL.id})
    ended = ended_tools(h)
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    await root.wait_for_idle()
    assert rig.reports == []
    assert len(await compactions(h)) == 1
    assert [type(t.outcome).__name__ for t in ended] == ["Completed", "Completed"]
    await h.close()


@pytest.mark.parametrize("observed", [False, True])
async def test_one_generation_task_goes_on_through_every_round_of_a_run(
    tmp_path: Path, observed: bool
) -> None:
    """The tool round hands the run on to the same generation task at its next round
    (one task row per round) instead of a successor task inserted and the current one
    written terminal (two): issue 36, the rows a round writes. The tools of every round
    are its children, and each later round's checkpoints carry the round's number."""
    from core.harness.runs import GENERATION
    from core.records import Completed

    rounds = 3
    steps = [
        faux_message(faux_tool_call("look", {"text": f"p{i}"}, id=f"c{i}")) for i in range(rounds)
    ]
    rig = Rig(tmp_path, "sqlite", steps=[*steps, faux_message("done")])

    async def look(args: Args, ctx: ToolContext) -> str:
        return "seen"

    async def after_tools(results: Any, ctx: Any) -> None:
        pass

    # An ``after_tools`` observer: the hand-over from the generation's ``tools`` phase,
    # not merged into the last result commit.
    hooks = {"hooks": Hooks(after_tools=after_tools)} if observed else {}
    rig.registry.install(extension("look", tool("look", look, replay="safe"), **hooks))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    written: list[Any] = []
    h.session.subscribe(lambda e: written.extend(t for t in e.tasks if t.kind == GENERATION))
    written_tools = ended_tools(h)
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    storage = h.session.storage
    gens = (await storage.scan_tasks(TaskQuery(kind=GENERATION))).items
    assert len(gens) == 1
    gen = gens[0]
    assert isinstance(gen.outcome, Completed)
    tools = written_tools
    assert len({t.id for t in tools}) == rounds and all(t.owner == gen.id for t in tools)
    # Each round's call started at its intent: kept in memory, never written.
    assert (await storage.scan_tasks(TaskQuery(kind="perdure.tool"))).items == []
    # Per round: waiting on its tools, then on to the next round (woken first, when
    # its ``tools`` phase hands over); plus its creation, reservation and answer (the
    # first round's pin writes nothing else, so it is sent uncommitted).
    assert len(written) == (3 if observed else 2) * rounds + 3
    later = [t.checkpoint for t in written if t.checkpoint and "round" in t.checkpoint]
    assert {cp["round"] for cp in later} == set(range(2, rounds + 2))
    await h.close()
