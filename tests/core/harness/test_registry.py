"""The registry: install/replace/uninstall by name, validation before publishing, resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from core.engine import Engine
from core.errors import HarnessError, RegistryError, UnknownTool
from core.harness import Hooks, Registry, define_extension, define_tool, section
from core.harness.tools import harness_of
from core.records import Completed, Task
from core.storage import MemoryStorage
from core.tasks import define_task
from core.tasks.registry import TaskRegistry
from core.tasks.runtime import TaskRuntime
from tests.core.harness.support import MODEL, Args, Rig, echo, tool


async def _phase(task: object, rt: object) -> None:
    return None


def test_install_replaces_in_place_and_old_snapshots_stay_as_they_were() -> None:
    registry = Registry([define_extension("a", tools=[tool("x", echo)]), define_extension("b")])
    before = registry.extensions
    registry.install(define_extension("a", tools=[tool("y", echo)]))
    assert [e.name for e in registry.extensions] == ["a", "b"]  # same position
    assert [t.name for t in registry.extensions[0].tools] == ["y"]
    assert [t.name for t in before[0].tools] == ["x"]
    registry.uninstall("a")
    assert [e.name for e in registry.extensions] == ["b"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: define_extension("e", tools=[tool("x", echo), tool("x", echo)]), "twice"),
        (
            lambda: define_extension("e", sections=[section("Bad Key", lambda c: "")]),
            "section keys",
        ),
        (
            lambda: define_extension("e", sections=[section("instructions", lambda c: "")]),
            "reserved",
        ),
        (
            lambda: define_extension(
                "e", tasks=[define_task("perdure.tool", phases={"p": _phase})]
            ),
            "reserved",
        ),
        (
            lambda: define_tool("bad name!", description="", parameters=Args, execute=echo),
            "tool names",
        ),
        (lambda: define_tool("t", description="", parameters=dict, execute=echo), "pydantic"),  # type: ignore[arg-type]
        (
            lambda: define_tool("t", description="", parameters=Args, execute=echo, replay="maybe"),  # type: ignore[arg-type]
            "replay",
        ),
    ],
)
def test_invalid_extensions_are_refused_before_publishing(build: object, message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        build()  # type: ignore[operator]


def test_task_names_may_not_collide_across_extensions() -> None:
    registry = Registry([define_extension("a", tasks=[define_task("t.x", phases={"p": _phase})])])
    with pytest.raises(RegistryError, match="both"):
        registry.install(define_extension("b", tasks=[define_task("t.x", phases={"p": _phase})]))
    assert [e.name for e in registry.extensions] == ["a"]  # nothing published


def test_resolution_selects_extensions_wraps_winners_and_filters_tools() -> None:
    def shout(t: object) -> object:
        original = t.execute  # type: ignore[attr-defined]

        async def louder(args: Args, ctx: object) -> str:
            return (await original(args, ctx)).upper()

        return define_tool(
            t.name,
            description=t.description,
            parameters=t.parameters,  # type: ignore[attr-defined]
            execute=louder,
        )

    hooks = Hooks()
    registry = Registry(
        [
            define_extension(
                "base",
                tools=[tool("read", echo), tool("write", echo)],
                sections=[section("a", lambda c: "A")],
            ),
            define_extension(
                "override",
                tools=[tool("read", echo, replay="safe")],
                wraps={"read": shout},
                hooks=hooks,
                sections=[section("a", lambda c: "A2")],
            ),
        ]
    )
    agent = registry.resolve({"model": MODEL, "tools": ["read", "missing"]})
    assert list(agent.tools) == ["read"]
    assert agent.tools["read"].replay == "unsafe"  # the wrapper rebuilt the winner
    assert [s.render(None) for s in agent.sections] == ["A2"]  # type: ignore[arg-type]
    assert agent.hooks == (hooks,)
    only_base = registry.resolve({"extensions": ["base", "gone"]})
    assert sorted(only_base.tools) == ["read", "write"] and only_base.hooks == ()
    assert (only_base.model, only_base.thinking, only_base.cwd) == (None, "off", None)


class Required(BaseModel):
    path: str


async def test_configure_refuses_unknown_tools_and_fields_and_writes_nothing(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path)
    rig.registry.install(
        define_extension(
            "fs", tools=[define_tool("read", description="", parameters=Required, execute=echo)]
        )
    )
    h = await rig.open()
    root = await h.root(agent={"model": MODEL})
    commits = rig.commits
    with pytest.raises(UnknownTool):
        await root.configure(tools=["read", "rm"])
    with pytest.raises(ValueError, match="unknown agent field"):
        await root.configure(colour="blue")
    with pytest.raises(ValueError, match="thinking"):
        await root.configure(thinking="extreme")
    assert rig.commits == commits
    assert await root.configure(tools=["read"], instructions="Be brief.") == {
        "model": MODEL,
        "tools": ["read"],
        "instructions": "Be brief.",
    }
    assert await root.configure(instructions=None) == {"model": MODEL, "tools": ["read"]}
    await h.close()


async def test_an_extension_task_reaches_the_harness_through_harness_of(tmp_path: Path) -> None:
    seen: list[object] = []
    refused: list[HarnessError] = []

    async def reach(task: Task, rt: TaskRuntime) -> None:
        try:
            seen.append(harness_of(rt))
        except HarnessError as error:
            refused.append(error)
        await rt.commit(lambda tx, current: Completed(None))

    reaching = define_task("t.reach", phases={"p": reach})
    rig = Rig(tmp_path)
    rig.registry.install(define_extension("e", tasks=[reaching]))
    h = await rig.open()
    task = await h.engine.create_task("t.reach")
    await h.engine.wait_for_task(task.id)
    assert seen == [h] and not refused
    await h.close()

    # The same task on an engine no harness opened: a clear error, not an AttributeError
    # deep inside the task.
    engine = await Engine.open(MemoryStorage(), tasks=TaskRegistry([reaching]), clock=rig.clock)
    bare = await engine.create_task(reaching)
    await engine.wait_for_task(bare.id)
    assert not seen[1:] and "without an agent harness" in str(refused[0])
    await engine.close()
