"""A run's usage (issue 36, the rows a round writes): the usage of the run's model
responses waits in ``live`` (``run.usage``, by model), which the round commit writes
anyway, and is added to the usage ledger (in ``live`` too, shown as the ``usage``
document) when the run ends — one ledger change a run, not one a tool round. ``usage()``
counts the waiting part all along, and a run that ends any other way (aborted, or
recovered after a crash) adds it too."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.faux import faux_message, faux_tool_call
from core.harness import ToolContext, Usage
from core.harness.builtin_documents import LIVE
from core.session.session import CommitEvent
from tests.core.harness.support import MODEL, Args, Rig, extension, tool

USED = Usage(input=100, output=10, cost=0.25)


def _times(n: int) -> Usage:
    total = Usage()
    for _ in range(n):
        total = total + USED
    return total


async def test_a_runs_usage_joins_the_ledger_once_when_it_ends(tmp_path: Path) -> None:
    rounds = 3
    steps = [
        faux_message(faux_tool_call("look", {"text": f"p{i}"}, id=f"c{i}"), usage=USED)
        for i in range(rounds)
    ]
    rig = Rig(tmp_path, "sqlite", steps=[*steps, faux_message("done", usage=USED)])
    seen: list[Usage] = []

    async def look(args: Args, ctx: ToolContext) -> str:
        seen.append(await root.usage())  # mid-run: the rounds so far, not yet in the ledger
        return "seen"

    rig.registry.install(extension("look", tool("look", look, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    ledger_writes = usage_documents = 0

    def count(event: CommitEvent) -> None:
        nonlocal ledger_writes, usage_documents
        usage_documents += any(d.record.kind == "usage" for d in event.documents)
        ledger_writes += any(
            d.record.kind == "live"
            and (
                "usage" in d.value  # type: ignore[operator]
                if d.ops is None
                else any(op[1][:1] == ["usage"] for op in d.ops)  # type: ignore[index]
            )
            for d in event.documents
        )

    h.session.subscribe(count)
    record = await (await root.submit("go")).wait()
    assert record.status == "done"
    assert seen == [_times(n) for n in range(1, rounds + 1)]
    assert ledger_writes == 1  # the answer's commit: the run's usage and the answer's
    assert usage_documents == 0  # the ledger is in live: no document of its own
    ledger = (await root.view())["docs"]["usage"]
    assert isinstance(ledger, dict)
    assert Usage.model_validate(ledger["total"]) == _times(rounds + 1)
    assert Usage.model_validate(ledger["models"][MODEL]) == _times(rounds + 1)
    assert "run" not in await h.session.document_value(LIVE, root.id)  # type: ignore[operator]
    assert await root.usage() == await h.usage() == _times(rounds + 1)
    await h.close()


async def test_an_aborted_run_adds_its_usage_to_the_ledger(tmp_path: Path) -> None:
    steps = [faux_message(faux_tool_call("wait", {"text": "p"}, id="c0"), usage=USED)]
    rig = Rig(tmp_path, "sqlite", steps=steps)
    started = asyncio.Event()

    async def wait(args: Args, ctx: ToolContext) -> str:
        started.set()
        await asyncio.Event().wait()  # until aborted
        return "never"

    rig.registry.install(extension("wait", tool("wait", wait, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    submission = await root.submit("go")
    await started.wait()
    assert await root.usage() == USED
    assert await submission.abort() == "aborted"
    record = await submission.wait()
    assert record.status == "unanswered"
    await root.wait_for_idle()
    ledger = (await root.view())["docs"]["usage"]
    assert isinstance(ledger, dict) and Usage.model_validate(ledger["total"]) == USED
    assert await root.usage() == USED
    await h.close()


async def test_a_runs_usage_waiting_in_live_survives_a_crash(tmp_path: Path) -> None:
    steps = [
        faux_message(faux_tool_call("look", {"text": "p"}, id="c0"), usage=USED),
        faux_message("done", usage=USED),
    ]
    rig = Rig(tmp_path, "sqlite", steps=steps)
    started = asyncio.Event()
    first = True

    async def look(args: Args, ctx: ToolContext) -> str:
        if first:
            started.set()
            await asyncio.Event().wait()  # the process dies here
        return "seen"

    rig.registry.install(extension("look", tool("look", look, replay="safe")))
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    submission = await root.submit("go")
    await started.wait()
    await rig.crash(h)
    first = False
    h = await rig.open()
    record = await (await h.submission(submission.id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    root = await h.root()
    assert await root.usage() == _times(2)  # the first round's, kept in ``live``, and the answer's
    await h.close()
