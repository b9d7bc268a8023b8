"""``perdure token``: mint a token, offline.

Two kinds, one command:

* ``--actor A --rights read|submit|admin [--conversation C] --ttl 1h``: a scoped API token
  (:mod:`runtimes.actor.tokens`) signed with the host's key: the newest of
  ``PERDURE_TOKEN_KEYS`` when it is set (as the host reads it), else the key derived from
  the host's API token (``--token`` / ``PERDURE_TOKEN`` or ``--token-file``);
* ``--workspace W [--ttl SECONDS] --secret-file F | --root R``: a sandbox workspace token
  (:mod:`remote_env.auth`), as ``remote_env``'s own ``token`` command mints it.

The token alone goes to stdout (for scripts), what it grants to stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from runtimes.actor.tokens import SigningKeys

__all__ = ["token"]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def token(
    actor: Annotated[
        str | None, typer.Option(help="an API token for this actor (with --rights)")
    ] = None,
    rights: Annotated[
        str | None,
        typer.Option(
            help="read (views, watch, listings), submit (read + submissions, abort, "
            "reminders) or admin (everything on the actor)"
        ),
    ] = None,
    conversation: Annotated[
        int | None, typer.Option(min=1, help="only this conversation of the actor")
    ] = None,
    ttl: Annotated[
        str, typer.Option(help="how long it is valid: 90 (seconds), 90s, 15m, 12h, 30d")
    ] = "1h",
    api_token: Annotated[
        str | None,
        typer.Option(
            "--token", envvar="PERDURE_TOKEN", help="the host's API token (to derive its key)"
        ),
    ] = None,
    token_file: Annotated[
        Path | None, typer.Option(help="the file holding the host's API token (perdure dev's)")
    ] = None,
    workspace: Annotated[
        str | None, typer.Option(help="a sandbox token for this workspace instead")
    ] = None,
    secret_file: Annotated[
        Path | None, typer.Option(help="with --workspace: the sandbox's secret file")
    ] = None,
    root: Annotated[
        Path | None, typer.Option(help="with --workspace: the sandbox root (its default secret)")
    ] = None,
) -> None:
    """Mint a scoped API token (--actor) or a sandbox workspace token (--workspace)."""
    from runtimes.actor.tokens import parse_duration

    if (actor is None) == (workspace is None):
        _fail("pass --actor (an API token) or --workspace (a sandbox token), one of them")
    try:
        seconds = parse_duration(ttl)
    except ValueError as error:
        _fail(f"--ttl: {error}")
    if workspace is not None:
        from remote_env.cli import token as workspace_token

        workspace_token(workspace=workspace, ttl=seconds, secret_file=secret_file, root=root)
        return
    assert actor is not None
    if rights is None:
        _fail("--actor needs --rights: read, submit or admin")
    keys = _signing_keys(api_token, token_file)
    try:
        minted = keys.mint(actor, rights, seconds, conversation=conversation)
    except ValueError as error:
        _fail(str(error))
    scope = keys.verify(minted)
    where = "" if conversation is None else f", conversation {conversation}"
    typer.echo(minted)
    typer.echo(f"{rights} on actor {actor}{where}, expires {_iso(scope.expires_at)}", err=True)


def _signing_keys(api_token: str | None, token_file: Path | None) -> SigningKeys:
    from runtimes.actor.tokens import SigningKeys, parse_keys

    try:
        keys = parse_keys(os.environ.get("PERDURE_TOKEN_KEYS"))
    except ValueError as error:
        _fail(f"PERDURE_TOKEN_KEYS: {error}")
    if keys:
        return SigningKeys(keys)
    if api_token is None and token_file is not None:
        try:
            api_token = token_file.read_text(encoding="utf-8").strip()
        except OSError as error:
            _fail(f"--token-file {token_file}: cannot read it: {error.strerror}")
    if not api_token:
        _fail(
            "the host's key is needed: pass --token (or PERDURE_TOKEN) or --token-file, "
            "or set PERDURE_TOKEN_KEYS as the host has it"
        )
    if len(api_token) < 16:
        _fail("the host's API token has at least 16 characters")
    return SigningKeys.for_host(api_token)


def _iso(seconds: int) -> str:
    from core.times import iso_time

    return iso_time(seconds * 1000)
