"""Tool sources (core/harness/tool_sources.py): tools listed per conversation from
elsewhere, kept in the ``tool_sources`` document, fetched before a model request only
when due, resolved without I/O."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from core.faux import faux_message, faux_tool_call
from core.harness import TOOL_SOURCES, ToolContext, ToolDefinition, ToolResult, define_extension
from core.harness.tool_sources import mark_changed
from core.jsonvalue import JsonValue
from core.session import Tx
from tests.core.harness.support import MODEL, Args, Rig, tool


class Catalogue:
    """A source whose 'server' is a list of names in memory; ``fetches`` counts I/O."""

    def __init__(self, names: list[str], *, ttl_ms: int = 60_000) -> None:
        self.names = names
        self.ttl_ms = ttl_ms
        self.fetches = 0
        self.down = False

    @property
    def name(self) -> str:
        return "cat"

    def tools(self, listing: JsonValue) -> Mapping[str, ToolDefinition]:
        names = listing.get("names") if isinstance(listing, dict) else None
        return {
            f"cat__{n}": tool(f"cat__{n}", self._run(str(n)), replay="safe")
            for n in (names if isinstance(names, list) else [])
        }

    def due(self, listing: JsonValue, now: int) -> bool:
        if not isinstance(listing, dict) or listing.get("changed"):
            return True
        return now - int(str(listing["at"])) >= self.ttl_ms

    async def fetch(self, listing: JsonValue, now: int) -> JsonValue:
        self.fetches += 1
        if self.down:
            raise ConnectionError("the catalogue is down")
        return {"at": now, "names": list(self.names)}

    def _run(self, name: str) -> Any:
        async def run(args: Args, ctx: ToolContext) -> ToolResult:
            conversation = ctx.conversation_id

            async def changed(tx: Tx) -> None:
                await mark_changed(tx, conversation, "cat")

            # "grow" adds a tool at the source and says so, as an MCP server's
            # notifications/tools/list_changed does.
            if name == "grow":
                self.names.append("later")
                return ToolResult("grown", apply=changed)
            return ToolResult(f"{name} ran")

        return run


def rig(tmp_path: Path, source: Catalogue, steps: list[Any]) -> Rig:
    made = Rig(tmp_path, steps=steps)
    made.registry.install(define_extension("catalogue", sources=[source]))
    return made


def offered(r: Rig, index: int) -> list[str]:
    return sorted(t.name for t in r.faux.state.requests[index].tools)


async def test_a_listing_is_fetched_once_and_kept_in_the_conversation(tmp_path: Path) -> None:
    source = Catalogue(["search"])
    r = rig(tmp_path, source, [faux_message("one"), faux_message("two")])
    h = await r.open()
    root = await h.root(agent={"model": MODEL, "tools": []})  # the filter leaves sources be
    await (await root.submit("a")).wait()
    await (await root.submit("b")).wait()
    assert offered(r, 0) == offered(r, 1) == ["cat__search"]
    assert source.fetches == 1
    listing = await h.session.document_value(TOOL_SOURCES, root.id)
    assert listing == {"cat": {"at": r.clock.now(), "names": ["search"]}}
    # A restarted process resolves the tools from the document: nothing is fetched.
    await h.close()
    r.faux.respond(faux_message(faux_tool_call("cat__search", {})), faux_message("three"))
    h = await r.open()
    root = await h.root()
    await (await root.submit("c")).wait()
    assert source.fetches == 1
    assert "search ran" in [m.content for m in r.faux.state.requests[-1].messages]
    # Past the TTL the next request lists again.
    r.clock.advance(60_000)
    r.faux.respond(faux_message("four"))
    await (await root.submit("d")).wait()
    assert source.fetches == 2
    await h.close()


async def test_a_tool_result_marks_the_listing_changed(tmp_path: Path) -> None:
    source = Catalogue(["grow"])
    steps = [faux_message(faux_tool_call("cat__grow", {})), faux_message("done")]
    r = rig(tmp_path, source, steps)
    h = await r.open()
    root = await h.root(agent={"model": MODEL})
    await (await root.submit("grow")).wait()
    assert offered(r, 0) == ["cat__grow"]
    assert offered(r, 1) == ["cat__grow", "cat__later"]
    assert source.fetches == 2
    await h.close()


async def test_a_failed_fetch_is_reported_and_the_request_goes_on(tmp_path: Path) -> None:
    source = Catalogue(["search"])
    source.down = True
    r = rig(tmp_path, source, [faux_message("without it")])
    h = await r.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("a")).wait()
    assert record.status == "done"
    assert offered(r, 0) == []
    assert [str(e) for e in r.reports] == ["the catalogue is down"]
    await h.close()


async def test_a_fork_starts_with_its_parents_listing(tmp_path: Path) -> None:
    source = Catalogue(["search"])
    r = rig(tmp_path, source, [faux_message("one"), faux_message("two")])
    h = await r.open()
    root = await h.root(agent={"model": MODEL})
    record = await (await root.submit("a")).wait()
    child = await root.fork(at_entry=int(str(record.answer)))
    await (await child.submit("b")).wait()
    assert offered(r, 1) == ["cat__search"]
    assert source.fetches == 1
    await h.close()
