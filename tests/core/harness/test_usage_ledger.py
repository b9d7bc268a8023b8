"""The usage ledger kept in ``live`` (issue 36): no ``usage`` document is stored any
more, and every way to read a conversation's usage answers as before — ``usage()`` of
the conversation and of the harness, the view's ``usage`` document (and ``live``
without it), the watch — across a reopen of the SQLite file, for a tool's usage outside
a run, and for an actor whose ledger an older version stored as a document of its own."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from core.docops import apply_ops
from core.faux import faux_message, faux_tool_call
from core.harness import Harness, ToolContext, Usage
from core.harness.builtin_documents import LIVE
from core.harness.runs import add_usage
from core.harness.usage_ledger import ledger_value, view_ops
from core.session import Tx
from core.storage import DocumentCreate
from tests.core.harness.support import MODEL, Args, Rig, entries, extension, tool
from tests.core.support import settle

ONE = Usage(input=100, output=10, cost=0.25)
TWO = Usage(input=300, output=20, cache_read=5, cost=0.5)


def _rig(tmp_path: Path, runs: int) -> Rig:
    """Each run: a tool round, then the answer, each response with its usage."""
    steps: list[Any] = []
    for i in range(runs):
        steps.append(faux_message(faux_tool_call("look", {"text": f"{i}"}, id=f"c{i}"), usage=ONE))
        steps.append(faux_message(f"answer {i}", usage=TWO))
    rig = Rig(tmp_path, "sqlite", steps=steps)

    async def look(args: Args, ctx: ToolContext) -> str:
        return "seen"

    rig.registry.install(extension("look", tool("look", look, replay="safe")))
    return rig


async def _transcript_usage(h: Harness, conversation_id: int) -> Usage:
    """The sum of the usage the transcript's model responses report."""
    total = Usage()
    for e in await entries(h, conversation_id):
        if e.kind == "assistant" and isinstance(e.message, dict):
            total = total + Usage.model_validate(e.message["usage"])
    return total


async def _replayed(watch: Any) -> Any:
    """The value a watch's frames so far build."""
    value: Any = None
    while watch.pending:
        frame = await watch.__anext__()
        if frame["type"] == "delta":
            value = apply_ops(value, copy.deepcopy(frame["ops"]))
        else:
            value = copy.deepcopy(frame["value"])
    return value


async def _stored_usage_document(h: Harness, conversation_id: int) -> object:
    return await h.session.storage.find_document("usage", "conversation", conversation_id)


async def test_no_usage_document_is_stored_and_every_reader_agrees_after_a_reopen(
    tmp_path: Path,
) -> None:
    runs = 3
    rig = _rig(tmp_path, runs)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    for i in range(runs):
        assert (await (await root.submit(f"go {i}")).wait()).status == "done"
        assert await _stored_usage_document(h, root.id) is None  # was created by run 1
    expected = await _transcript_usage(h, root.id)
    assert expected == Usage(input=1200, output=90, cache_read=15, cost=2.25)
    view = await root.view()
    ledger = view["docs"]["usage"]
    assert Usage.model_validate(ledger["total"]) == expected
    assert Usage.model_validate(ledger["models"][MODEL]) == expected
    assert ledger["tools"] == {}
    assert "usage" not in view["docs"]["live"] and await root.live() == view["docs"]["live"]
    assert await root.usage() == await h.usage() == expected
    # Stored as a plain JSON object in live: what a raw reader of live sees.
    stored = await h.session.document_value(LIVE, root.id)
    assert isinstance(stored, dict) and stored["usage"] == ledger
    await h.close()

    h = await rig.open()  # the same SQLite file, closed and opened again
    root = await h.root()
    assert (await root.view())["docs"]["usage"] == ledger
    assert await root.usage() == await h.usage() == expected
    await h.close()


async def test_a_tools_usage_reaches_the_ledger_outside_a_run(tmp_path: Path) -> None:
    rig = _rig(tmp_path, 1)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})

    async def used_by_a_tool(tx: Tx) -> None:
        await add_usage(tx, root.id, ONE, model=None, tool="search")

    await h.session.commit(used_by_a_tool)  # idle: no run, no live document yet
    ledger = (await root.view())["docs"]["usage"]
    assert Usage.model_validate(ledger["tools"]["search"]) == ONE
    assert Usage.model_validate(ledger["total"]) == ONE and ledger["models"] == {}
    assert await root.usage() == ONE
    assert (await (await root.submit("go")).wait()).status == "done"
    ledger = (await root.view())["docs"]["usage"]
    assert Usage.model_validate(ledger["tools"]["search"]) == ONE
    assert Usage.model_validate(ledger["total"]) == ONE + ONE + TWO
    assert await _stored_usage_document(h, root.id) is None
    await h.close()


async def test_a_ledger_stored_as_a_document_by_an_older_version_is_read_and_carried_on(
    tmp_path: Path,
) -> None:
    """An actor written before the ledger moved into ``live``: its ``usage`` document,
    written here directly through the storage API as the older version wrote it."""
    rig = _rig(tmp_path, 1)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    conversation_id = root.id
    await h.close()
    old = {
        "total": {**TWO.model_dump()},
        "models": {"old/model": TWO.model_dump()},
        "tools": {"search": TWO.model_dump()},
        "compactions": {"landed": 1},
    }
    storage = await rig.storage()
    doc_id = await storage.mint_id()
    await storage.commit(
        [DocumentCreate(doc_id, "usage", "conversation", conversation_id, None, "latest", 1, old)]
    )
    await storage.close()

    h = await rig.open()
    root = await h.root()
    watch = await root.watch()
    assert (await root.view())["docs"]["usage"] == old
    assert await root.usage() == await h.usage() == TWO
    assert (await (await root.submit("go")).wait()).status == "done"
    ledger = (await root.view())["docs"]["usage"]
    assert Usage.model_validate(ledger["total"]) == TWO + ONE + TWO
    assert Usage.model_validate(ledger["models"]["old/model"]) == TWO
    assert Usage.model_validate(ledger["models"][MODEL]) == ONE + TWO
    assert ledger["tools"] == old["tools"] and ledger["compactions"] == {"landed": 1}
    assert await root.usage() == await h.usage() == TWO + ONE + TWO
    # The watch that started on the old document follows the ledger into live.
    await settle()
    assert await _replayed(watch) == await root.view()
    watch.stop()
    # The old document is never written again; a fork starts with an empty ledger.
    state = await h.session.storage.document(doc_id)
    assert state is not None and state.value == old
    answer = (await entries(h, conversation_id))[-1]
    fork = await h.fork(conversation_id, answer.id)
    assert (await fork.view())["docs"]["usage"] == {"total": {}, "models": {}, "tools": {}}
    assert await fork.usage() == Usage()
    await h.close()

    h = await rig.open()
    root = await h.root()
    assert (await root.view())["docs"]["usage"] == ledger
    await h.close()


async def test_a_watch_shows_the_ledger_as_the_view_does_across_live_s_new_bases(
    tmp_path: Path,
) -> None:
    """``live`` is stored as a new base every 32 deltas (a whole value, not ops): the
    watch splits it into ``live`` and ``usage`` as the view does."""
    rig = _rig(tmp_path, 12)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    watch = await root.watch()
    bases = 0

    def count(event: Any) -> None:
        nonlocal bases
        bases += any(d.record.kind == "live" and d.ops is None for d in event.documents)

    h.session.subscribe(count)
    for i in range(12):
        assert (await (await root.submit(f"go {i}")).wait()).status == "done"
    await settle()
    assert bases >= 2  # the creation and at least one rebase with the ledger in it
    view = await root.view()
    assert await _replayed(watch) == view and "usage" not in view["docs"]["live"]
    assert Usage.model_validate(view["docs"]["usage"]["total"]) == await root.usage()
    watch.stop()
    await h.close()


def test_the_watch_moves_a_change_inside_the_ledger_to_the_usage_document() -> None:
    """A commit's ops on ``live``: one inside the ledger lands at the same place in the
    view's ``usage`` document, the rest in ``live``; readers get a copy they may change."""
    ledger = {"total": {"input": 5}, "models": {}, "tools": {}}
    live = {"run": None, "usage": ledger}
    ops: list[Any] = [["s", ["usage", "total", "input"], 5], ["s", ["run"], None]]
    assert view_ops(ops, live, ["docs"]) == [
        ["s", ["docs", "usage", "total", "input"], 5],
        ["s", ["docs", "live", "run"], None],
    ]
    assert view_ops(None, live, ["docs"]) == [
        ["s", ["docs", "live"], {"run": None}],
        ["s", ["docs", "usage"], ledger],
    ]


async def test_a_read_ledger_is_a_copy_its_reader_may_change(tmp_path: Path) -> None:
    rig = _rig(tmp_path, 1)
    h = await rig.open()
    live: dict[str, Any] = {"usage": {"total": {"input": 5}, "models": {}, "tools": {}}}
    read = await ledger_value(h.session, 1, live)
    read["total"]["input"] = 6  # type: ignore[index]
    assert live["usage"]["total"] == {"input": 5}
    await h.close()
