"""Recoverable tools against a real sandbox: the op log gives the result back after a crash.

The sandbox server runs in-process (ASGI) with its real op log and real subprocesses;
the harness "process" crashes while ``bash`` runs and a new one recovers the call by its
op id: the command ran once and the model sees its real exit code and output.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.faux import faux_message, faux_tool_call
from core.tools import coding_tools
from tests.core.harness.support import MODEL, Rig, entries
from tests.core.support import until
from tests.remote_env.support import asgi_env, running_app, settings

COMMAND = "echo start >> log.txt; sleep 1; echo done >> log.txt; echo all good; exit 3"


async def test_a_crash_during_bash_recovers_the_recorded_result(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    async with running_app(settings(sandbox)) as app, asgi_env(app, "actor-1") as env:
        rig = Rig(
            tmp_path,
            "sqlite",
            env=lambda conversation_id, cwd: env,
            steps=[
                faux_message(faux_tool_call("bash", {"command": COMMAND}, id="call_1")),
                faux_message("ok"),
            ],
        )
        rig.registry.install(coding_tools())
        h = await rig.open()
        root = await h.root(agent={"model": MODEL})
        sub = await root.submit("run it")
        log = sandbox / "actor-1" / "log.txt"
        await until(log.exists)
        await rig.crash(h)  # the harness dies; the sandbox keeps running the command

        h = await rig.open()
        record = await (await h.submission(sub.id)).wait()  # type: ignore[union-attr]
        assert record.status == "done"
        assert log.read_text() == "start\ndone\n"  # ran exactly once
        (result,) = [e for e in await entries(h) if e.kind == "tool_result"]
        content = result.message["content"]  # type: ignore[index,call-overload]
        assert "all good" in content and "interrupted" not in content
        assert "3" in content  # the real exit code reached the model
        assert [d["code"] for d in result.data["diagnostics"]] == []  # type: ignore[index,call-overload]
        await h.close()


async def test_an_op_the_sandbox_never_saw_is_reported_interrupted(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    started = asyncio.Event()
    async with running_app(settings(sandbox)) as app, asgi_env(app, "actor-2") as env:

        class Unreachable:
            """Hands out the real env, except that the first command never reaches it."""

            def __getattr__(self, name: str) -> object:
                return getattr(env, name)

            async def run_command(self, command: str, **kw: object) -> object:
                started.set()
                await asyncio.Event().wait()  # lost on the way: the sandbox never sees it
                raise AssertionError("unreachable")

        rig = Rig(
            tmp_path,
            "sqlite",
            env=lambda conversation_id, cwd: Unreachable(),  # type: ignore[return-value,arg-type]
            steps=[
                faux_message(faux_tool_call("bash", {"command": "echo hi"}, id="c1")),
                faux_message("ok"),
            ],
        )
        rig.registry.install(coding_tools())
        h = await rig.open()
        sub = await (await h.root(agent={"model": MODEL})).submit("go")
        await started.wait()
        await rig.crash(h)
        rig.env = lambda conversation_id, cwd: env
        h = await rig.open()
        assert (await (await h.submission(sub.id)).wait()).status == "done"  # type: ignore[union-attr]
        (result,) = [e for e in await entries(h) if e.kind == "tool_result"]
        content = result.message["content"]  # type: ignore[index,call-overload]
        assert "Tool bash was interrupted and may have partially run" in content
        assert "no record of the operation" in content
        await h.close()
