"""Actor ids and sandbox workspaces follow one rule: every id a host admits gets its
workspace on the sandbox, and every id a host refuses is refused by the sandbox too."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.env import OpRef
from remote_env.auth import mint_token, verify_token
from runtimes.actor import InvalidActorId, check_actor_id
from tests.remote_env.support import SECRET, asgi_env, run, running_app, settings

# Edge ids: leading "_" and "-" (once admitted by hosts but refused by the sandbox),
# one character, the longest.
ADMITTED = ["_lead", "-dash", "_", "-", "a", "Z9", "x" * 64, "a_b-c"]
REFUSED = ["", "x" * 65, ".hidden", "a/b", "a.b", "a b", "é", "a\n", "..", "a:b"]


@pytest.mark.parametrize("actor", ADMITTED)
def test_an_admitted_actor_id_is_a_workspace_on_a_real_sandbox(tmp_path: Path, actor: str) -> None:
    assert check_actor_id(actor) == actor
    assert verify_token(SECRET, mint_token(SECRET, actor, 60)).workspace == actor

    async def main() -> str:
        async with (
            running_app(settings(tmp_path / "root")) as app,
            asgi_env(app, actor) as env,
        ):
            await env.write("note.txt", "hello\n", OpRef(id="t:1"))
            return (await env.read("note.txt")).text

    assert run(main()) == "hello"
    assert (tmp_path / "root" / actor / "note.txt").read_text() == "hello\n"


@pytest.mark.parametrize("actor", REFUSED)
def test_a_refused_actor_id_is_refused_by_the_sandbox_too(actor: str) -> None:
    with pytest.raises(InvalidActorId):
        check_actor_id(actor)
    with pytest.raises(ValueError, match="invalid workspace name"):
        mint_token(SECRET, actor, 60)
