"""Forks and typed documents at the harness level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from core.errors import DocumentError, UnknownRecord
from core.faux import faux_message, faux_tool_call
from core.harness import ToolContext, ToolResult, define_extension
from core.session import Tx, define_doc
from core.storage import EntryQuery
from tests.core.harness.support import MODEL, Rig, entries, tool

PLAN = define_doc("app.plan", history="rewindable", fork="as_of", initial=lambda: {"steps": []})
CART = define_doc("app.cart", fork="current", initial=lambda: {"items": []})
DRAFT = define_doc("app.draft", fork="initial", initial=lambda: {"text": ""})
APP = define_extension("app", documents=[PLAN, CART, DRAFT])


async def set_doc(h: Any, definition: Any, conversation: int, value: Any) -> None:
    async def write(tx: Tx) -> None:
        (await tx.doc(definition, conversation)).value = value

    await h.session.commit(write)


async def test_a_fork_sees_history_up_to_its_entry_and_copies_documents_by_policy(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, steps=[faux_message("one"), faux_message("two"), faux_message("three")])
    rig.registry.install(APP)
    h = await rig.open()
    root = await h.root(agent={"model": MODEL, "instructions": "v1"})
    await set_doc(h, PLAN, 1, {"steps": ["a"]})
    await set_doc(h, CART, 1, {"items": ["x"]})
    await set_doc(h, DRAFT, 1, {"text": "private"})
    first = await (await root.submit("first")).wait()
    fork_point = first.answer
    assert fork_point is not None
    # After the fork point the parent moves on.
    await root.configure(instructions="v2")
    await set_doc(h, PLAN, 1, {"steps": ["a", "b"]})
    await set_doc(h, CART, 1, {"items": ["x", "y"]})
    await (await root.submit("second")).wait()

    child = await root.fork(fork_point, agent={"thinking": "low"})
    assert [e.kind for e in (await child.context()).entries] == ["user", "system", "assistant"]
    assert await child.document(PLAN) == {"steps": ["a"]}  # as_of the fork entry
    assert await child.document(CART) == {"items": ["x", "y"]}  # current
    assert await child.document(DRAFT) == {"text": ""}  # initial
    agent = await child.agent()
    assert (agent["instructions"], agent["thinking"]) == ("v1", "low")  # as_of + override
    # Independent from now on, in both directions.
    await set_doc(h, CART, child.id, {"items": ["child only"]})
    assert await root.document(CART) == {"items": ["x", "y"]}
    record = await (await child.submit("in the fork")).wait()
    assert record.status == "done"
    sent = rig.faux.state.requests[-1].messages
    assert [m.content for m in sent if m.role == "user"] == ["first", "in the fork"]  # type: ignore[union-attr]
    assert [e.kind for e in await entries(h)].count("user") == 2  # the parent is untouched

    grandchild = await child.fork(record.answer)  # type: ignore[arg-type]
    users = [e for e in (await grandchild.context()).entries if e.kind == "user"]
    assert [u.message["content"] for u in users] == ["first", "in the fork"]  # type: ignore[index,call-overload]
    await h.close()


async def test_forking_at_an_entry_the_conversation_cannot_see_is_refused(tmp_path: Path) -> None:
    rig = Rig(tmp_path, steps=[faux_message("a"), faux_message("b")])
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    other = await h.create_conversation(agent={"model": MODEL})
    elsewhere = await (await other.submit("hi")).wait()
    commits = rig.commits
    with pytest.raises(UnknownRecord, match="not visible"):
        await root.fork(elsewhere.answer)  # type: ignore[arg-type]
    with pytest.raises(UnknownRecord):
        await h.fork(999, 1)
    with pytest.raises(ValueError, match="unknown agent field"):
        await other.fork(elsewhere.answer, agent={"colour": "red"})  # type: ignore[arg-type]
    assert rig.commits == commits
    await h.close()


class Todo(BaseModel):
    title: str
    done: bool = False


class Todos(BaseModel):
    items: list[Todo] = []


TODOS = define_doc("app.todos", model=Todos, history="rewindable", fork="as_of")


class AddTodo(BaseModel):
    title: str


async def add_todo(args: AddTodo, ctx: ToolContext) -> ToolResult:
    async def apply(tx: Tx) -> None:
        doc = await tx.doc(TODOS, ctx.conversation_id)
        doc.value["items"].append({"title": args.title})  # type: ignore[call-overload,index,union-attr]

    return ToolResult(f"added {args.title!r}", apply=apply)


async def test_a_tool_updates_a_typed_document_in_the_commit_of_its_result(tmp_path: Path) -> None:
    rig = Rig(
        tmp_path,
        steps=[
            faux_message(faux_tool_call("add_todo", {"title": "buy milk"}, id="c1")),
            faux_message("added"),
            faux_message(faux_tool_call("add_todo", {"title": "call mom"}, id="c2")),
            faux_message("added again"),
        ],
    )
    rig.registry.install(
        define_extension(
            "todo", tools=[tool("add_todo", add_todo, parameters=AddTodo)], documents=[TODOS]
        )
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    seqs: dict[str, Any] = {}

    def note(event: Any) -> None:
        if any(d.record.kind == "app.todos" for d in event.documents):
            seqs.setdefault("doc", event.seq)
        if any(e.kind == "tool_result" for e in event.entries):
            seqs.setdefault("result", event.seq)

    h.session.subscribe(note)
    await (await root.submit("remember milk")).wait()
    assert seqs["doc"] == seqs["result"]  # one commit: the result and the document change
    first_answer = (await h.session.storage.scan_entries(EntryQuery(1, limit=1))).items[0].id
    await (await root.submit("and mom")).wait()
    assert await root.document(TODOS) == {
        "items": [{"title": "buy milk", "done": False}, {"title": "call mom", "done": False}]
    }
    assert await root.document(TODOS, at_entry=first_answer) == {
        "items": [{"title": "buy milk", "done": False}]
    }

    async def invalid(tx: Tx) -> None:
        (await tx.doc(TODOS, 1)).value = {"items": [{"done": "maybe"}]}

    commits = rig.commits
    with pytest.raises(DocumentError, match="fails its model"):
        await h.session.commit(invalid)
    assert rig.commits == commits
    await h.close()
