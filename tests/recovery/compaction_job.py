"""Compaction jobs for the SIGKILL tests of ``test_compaction_kill.py``, one per process.

``python -m tests.recovery.compaction_job MODE PHASE DB``; every line printed is JSON.

* ``queued``: one submission whose model makes tool rounds on a 4,000-token window. In
  phase ``first`` the first round starts a background compaction; the second request
  waits until the summary is queued in the inbox, says ``queued`` and hangs (the test
  kills the process there). Phase ``second`` reopens the file and lets the run finish.
* ``chunks``: a conversation several times the summarizer's limit, compacted by hand. In
  phase ``first`` the first chunk's summary is checkpointed and the second chunk's
  request hangs (killed there); phase ``second`` resumes the compaction.

Summary requests are reported with the question numbers they carry and the previous
summary they build on, so the test can tell what was summarized where.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

from core.faux import FauxModel, FauxState, FauxStep, faux_message, faux_tool_call
from core.harness import (
    CompactionSettings,
    Harness,
    HarnessSettings,
    ModelRequest,
    Registry,
    SystemMessage,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from core.harness.builtin_documents import INBOX
from core.harness.compaction import SUMMARY_PROMPT, estimate_tokens
from core.harness.models import ModelInfo
from core.harness.runs import queued_summary
from runtimes.actor.clock import SystemClock
from runtimes.local.sqlite import open_sqlite_storage
from tests.core.harness.support import echo, entries, extension, kinds, tool

SMALL = ModelInfo("faux/small", context_window=4000, max_tokens=1000)
LIMIT = 3000  # window - reserve


def settings(enabled: bool = True) -> HarnessSettings:
    return HarnessSettings(
        compaction=CompactionSettings(
            enabled=enabled, reserve_tokens=1000, keep_recent_tokens=1, background_tokens=1000
        )
    )


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def is_summary(request: ModelRequest) -> bool:
    first = request.messages[0] if request.messages else None
    return isinstance(first, SystemMessage) and first.content == SUMMARY_PROMPT


def described(request: ModelRequest) -> dict[str, Any]:
    prompt = request.messages[1]
    assert isinstance(prompt, UserMessage)
    previous = re.search(r"<previous-summary>\n(.*?)\n</previous-summary>", prompt.content)
    size = sum(estimate_tokens(m) for m in request.messages)
    assert size <= LIMIT, f"a summary request of {size} tokens exceeds {LIMIT}"
    return {
        "questions": [int(n) for n in re.findall(r"question (\d+):", prompt.content)],
        "previous": previous.group(1) if previous else None,
    }


async def open_harness(db: Path, model: FauxModel, *, enabled: bool = True) -> Harness:
    storage = await open_sqlite_storage(db)
    return await Harness.open(
        storage,
        models=model,
        registry=Registry([extension("tools", tool("echo", echo))]),
        settings=settings(enabled),
        clock=SystemClock(),
    )


async def queued(phase: str, db: Path) -> None:
    holder: dict[str, Harness] = {}
    hang = asyncio.Event()

    async def step(request: ModelRequest, state: FauxState) -> FauxStep:
        if is_summary(request):
            say(summary_request=described(request))
            return faux_message("summary of the start")
        say(request=[m.role for m in request.messages], first=_first_text(request))
        last = request.messages[-1]
        if isinstance(last, UserMessage):
            return faux_message(
                faux_tool_call("echo", {"text": "one"}, id="c1"),
                usage=Usage(input=2400, output=100),  # in the background band
            )
        assert isinstance(last, ToolResultMessage)
        if last.tool_call_id == "c1":
            if phase == "first":
                h = holder["h"]
                for _ in range(10_000):  # the compaction commits its summary meanwhile
                    if queued_summary(await h.session.document_value(INBOX, 1)):
                        break
                    await asyncio.sleep(0.001)
                say(queued=queued_summary(await h.session.document_value(INBOX, 1)))
                await hang.wait()  # killed here
            return faux_message(faux_tool_call("echo", {"text": "two"}, id="c2"))
        return faux_message("all done")

    h = holder["h"] = await open_harness(db, FauxModel(fallback=step, models=[SMALL]))
    try:
        if phase == "first":
            root = await h.root(agent={"model": SMALL.id})
            sub = await root.submit("echo one, then two")
            say(submitted=sub.id)
            await sub.wait()
            return
        sub_id = int(sys.argv[4])
        again = await h.submission(sub_id)
        assert again is not None
        record = await again.wait()
        await (await h.conversation(1)).wait_for_idle()
        say(status=record.status, kinds=kinds(await entries(h)))
    finally:
        await h.close()


def _first_text(request: ModelRequest) -> str:
    first = request.messages[0] if request.messages else None
    return first.content if isinstance(first, UserMessage) else ""


async def chunks(phase: str, db: Path) -> None:
    hang = asyncio.Event()
    count = 0

    async def summarize(request: ModelRequest, state: FauxState) -> FauxStep:
        nonlocal count
        assert is_summary(request)
        count += 1
        say(summary_request=described(request))
        if phase == "first" and count == 2:
            await hang.wait()  # killed here, between chunk 1 and chunk 2
        return faux_message(f"summary after part {count} of {phase}")

    if phase == "first":
        build = FauxModel(fallback=faux_message("noted"), models=[SMALL])
        h = await open_harness(db, build, enabled=False)
        root = await h.root(agent={"model": SMALL.id})
        for n in range(12):
            await (await root.submit(f"question {n}: " + "q" * 2000)).wait()
        await h.close()
    h = await open_harness(db, FauxModel(fallback=summarize, models=[SMALL]))
    try:
        root = await h.conversation(1)
        if phase == "first":
            say(compaction=await root.compact())
        h.resume()
        await root.wait_for_idle()
        items = await entries(h)
        summary = items[-1].message if items[-1].kind == "compaction" else None
        say(kinds=kinds(items), summary=summary)
    finally:
        await h.close()


if __name__ == "__main__":
    mode, phase, path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    asyncio.run({"queued": queued, "chunks": chunks}[mode](phase, path))
