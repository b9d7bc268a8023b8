"""The ``perdure`` command line."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from runtimes.client import ActorClient

__all__ = ["app", "main"]

# -h works like --help everywhere. Plain (not rich) help: rich panels print a "<bool>"
# type beside every flag, which reads as if the flag took a value.
_HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    help="perdure: a durable agent harness.",
    no_args_is_help=True,
    context_settings=_HELP,
    rich_markup_mode=None,
)
demo_app = typer.Typer(
    help="Runnable demonstrations.", context_settings=_HELP, rich_markup_mode=None
)
app.add_typer(demo_app, name="demo")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"perdure {_version()}")
        raise typer.Exit()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("perdure")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


@app.callback()
def _perdure(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="print perdure's version and exit",
        ),
    ] = False,
) -> None:
    """perdure: a durable agent harness."""


def _mount_sandbox_commands() -> None:
    # The sandbox server's own CLI (``sandbox``) under the perdure command; its ``token``
    # is one half of perdure's (runtimes/cli/tokens.py: API tokens and workspace tokens).
    from remote_env.cli import app as sandbox_cli
    from runtimes.cli.tokens import token

    for command in sandbox_cli.registered_commands:
        if command.name != "token" and getattr(command.callback, "__name__", "") != "token":
            app.registered_commands.append(command)
    app.command("token")(token)


_mount_sandbox_commands()


@demo_app.callback(invoke_without_command=True)
def demo(
    ctx: typer.Context,
    workdir: Annotated[
        Path | None,
        typer.Option(help="keep the demo's files (actors, sandbox, logs) in this new directory"),
    ] = None,
) -> None:
    """The travel agent: kill -9 mid-tools, resume, and a reminder across eviction."""
    if ctx.invoked_subcommand is not None:
        return
    from remote_env.bwrap import locate_bwrap, missing_bwrap
    from runtimes.cli.demo.run import run_demo

    if workdir is not None and workdir.exists():
        _fail(
            f"--workdir {workdir} exists: pass a new directory (the demo creates it and "
            "keeps its files there), or remove that one"
        )
    # The demo's sandbox confines its commands; say so before starting anything rather
    # than after the booking times out.
    if locate_bwrap() is None:
        _fail(missing_bwrap(offer_unconfined=False))
    if not run_demo(workdir):
        raise typer.Exit(1)


@demo_app.command("counter")
def demo_counter(
    db: Path = typer.Option(Path("counter.sqlite"), help="SQLite file holding the count."),
    to: int = typer.Option(10, min=1, help="Count to this number (for a new count)."),
    interval_ms: int = typer.Option(500, min=0, help="Milliseconds between ticks."),
) -> None:
    """Count durably: kill it mid-count and run it again to see it carry on."""
    from runtimes.cli.counter import run_counter

    result = asyncio.run(run_counter(db, to=to, interval_ms=interval_ms))
    typer.echo(f"done: {result}")


@app.command()
def dev(
    data: Annotated[Path, typer.Option(help="directory of the actors' SQLite files")] = Path(
        "perdure-data"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="port on 127.0.0.1 (0: any)")] = 8787,
    model: Annotated[
        str | None,
        typer.Option(
            envvar="PERDURE_MODEL",
            help="litellm model string, e.g. openai/gpt-4o-mini (default: the demo model)",
        ),
    ] = None,
    api_base: Annotated[
        str | None, typer.Option(help="the model server's base URL (local or proxy servers)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="PERDURE_TOKEN", help="API token (default: a fresh random one)"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="keep the API token in this file (created on first run): restarts keep it"
        ),
    ] = None,
    idle_evict: Annotated[
        float, typer.Option(min=0, help="seconds before an idle actor is evicted")
    ] = 300.0,
    sandbox: Annotated[
        str | None, typer.Option(help="sandbox server URL: enables the coding tools")
    ] = None,
    sandbox_secret: Annotated[
        Path | None, typer.Option(help="the sandbox server's token secret file")
    ] = None,
    sandbox_wait: Annotated[
        float,
        typer.Option(min=0, help="seconds to wait for a sandbox server that is still starting"),
    ] = 15.0,
    log_format: Annotated[
        str, typer.Option(help="log lines on stderr: text (readable) or json")
    ] = "text",
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            envvar="PERDURE_CORS_ORIGINS",
            help="a browser origin allowed to call the API (CORS), e.g. "
            "http://localhost:5173; repeat for more (default: none)",
        ),
    ] = None,
    mcp: Annotated[
        Path | None,
        typer.Option(
            help='MCP servers for the agents: a JSON file {"servers": [{"name", "url", '
            '"headers", "tools", "replay", "approval", "timeout_s", "ttl_s"}]}; '
            "${NAME} in a header is the environment variable NAME",
        ),
    ] = None,
) -> None:
    """Run the actor HTTP API on 127.0.0.1 for development (Ctrl-C stops it cleanly).

    Start-up checks the data directory, the port, the model and the sandbox and stops
    with one line saying what to fix. Logs one line per request, model call, tool call
    and recovery on stderr; OpenTelemetry spans are exported when OTEL_* asks for it."""
    from runtimes.cli.dev import DevOptions, run_dev
    from runtimes.cli.preflight import PreflightError

    if (sandbox is None) != (sandbox_secret is None):
        _fail("--sandbox and --sandbox-secret go together: pass both, or neither")
    if log_format not in ("text", "json"):
        _fail(f"--log-format {log_format}: use text or json")
    from runtimes.actor.cors import parse_origins
    from runtimes.actor.tokens import parse_keys

    try:
        origins = parse_origins(" ".join(cors_origin or ()))
    except ValueError as error:
        _fail(f"--cors-origin: {error}")
    try:  # a secret: from the environment only, never the command line
        keys = parse_keys(os.environ.get("PERDURE_TOKEN_KEYS"))
    except ValueError as error:
        _fail(f"PERDURE_TOKEN_KEYS: {error}")
    options = DevOptions(
        data_dir=data,
        port=port,
        model=model,
        api_base=api_base,
        token=token,
        token_file=token_file,
        idle_evict_s=idle_evict,
        sandbox_url=sandbox,
        sandbox_secret_file=sandbox_secret,
        sandbox_wait_s=sandbox_wait,
        log_format="json" if log_format == "json" else "text",
        signing_keys=keys,
        cors_origins=origins,
        mcp_file=mcp,
    )
    try:
        run_dev(options, say=typer.echo)
    except PreflightError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        # uvicorn re-raises the SIGINT it handled once it has shut down, but whether
        # asyncio's runner turns that into KeyboardInterrupt depends on when it sees the
        # signal: the server may also just return. Either way it has stopped.
        pass
    typer.echo("stopped")


def _fail(message: str) -> NoReturn:
    """One line on stderr, exit status 2: what the user has to fix."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command("inspect")
def inspect_actor(
    actor: Annotated[str, typer.Argument(help="the actor (conversation-tree) id")],
    data: Annotated[
        Path | None,
        typer.Option(help="read the actor's storage here (not while a host serves it)"),
    ] = None,
    url: Annotated[str | None, typer.Option(help="ask the host serving the actor")] = None,
    token: Annotated[
        str | None, typer.Option(envvar="PERDURE_TOKEN", help="API token for --url")
    ] = None,
) -> None:
    """Print an actor's live task tree, from its storage (--data) or its host (--url)."""
    from rich.console import Console

    from runtimes.actor import HostError
    from runtimes.cli.taskview import (
        TaskGraphUnavailable,
        fetch_task_graph,
        read_task_graph,
        render_task_graph,
    )

    if (data is None) == (url is None):
        raise typer.BadParameter("give exactly one of --data DIR or --url URL")
    try:
        if url is not None:
            if not token:
                raise typer.BadParameter("--url needs --token (or PERDURE_TOKEN)")
            graph = fetch_task_graph(url, actor, token)
        else:
            assert data is not None
            graph = asyncio.run(read_task_graph(data, actor))
    except (HostError, TaskGraphUnavailable) as error:
        hint = " (a host is serving it: use --url)" if "another process" in str(error) else ""
        typer.echo(f"error: {error}{hint}", err=True)
        raise typer.Exit(1) from None
    Console(width=int(os.environ.get("COLUMNS", "100"))).print(render_task_graph(actor, graph))


@app.command("chat")
def chat(
    actor: Annotated[str, typer.Argument(help="the actor (conversation-tree) id")] = "demo",
    url: Annotated[
        str, typer.Option(envvar="PERDURE_URL", help="the host's URL (perdure dev prints it)")
    ] = "http://127.0.0.1:8787",
    token: Annotated[
        str | None, typer.Option(envvar="PERDURE_TOKEN", help="the host's API token")
    ] = None,
    conversation: Annotated[
        int, typer.Option(min=1, help="the conversation to talk in (1: the root)")
    ] = 1,
) -> None:
    """Talk to an actor: lines you type are sent (while it works, they steer it); its
    answers stream in. Ctrl-C aborts the run; Ctrl-C when idle, Ctrl-D or /quit exits."""
    from runtimes.cli.chat import ChatOptions, chat_main

    if not token:
        raise typer.BadParameter("--token (or PERDURE_TOKEN) is required")
    code = chat_main(ChatOptions(url=url, token=token, actor=actor, conversation_id=conversation))
    raise typer.Exit(code)


_URL_OPTION = typer.Option(envvar="PERDURE_URL", help="the host's URL (perdure dev prints it)")
_TOKEN_OPTION = typer.Option(envvar="PERDURE_TOKEN", help="the host's API token")


@app.command("ls")
def list_actors(
    actor: Annotated[
        str | None, typer.Argument(help="list this actor's conversations instead")
    ] = None,
    url: Annotated[str, _URL_OPTION] = "http://127.0.0.1:8787",
    token: Annotated[str | None, _TOKEN_OPTION] = None,
) -> None:
    """List the host's actors, or an ACTOR's conversations (forks and sub-agents)."""
    from runtimes.actor import InvalidActorId
    from runtimes.cli.history import HostUnavailable, conversation_line, print_lines

    if not token:
        raise typer.BadParameter("--token (or PERDURE_TOKEN) is required")

    async def lines(client: ActorClient) -> AsyncIterator[str]:
        if actor is None:
            async for name in client.actors():
                yield name
        else:
            async for conversation in client.conversations(actor):
                yield conversation_line(conversation)

    try:
        print_lines(url, token, lines, typer.echo)
    except (HostUnavailable, InvalidActorId) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


@app.command("log")
def log(
    actor: Annotated[str, typer.Argument(help="the actor (conversation-tree) id")],
    conversation: Annotated[int, typer.Argument(min=1, help="the conversation (1: the root)")] = 1,
    url: Annotated[str, _URL_OPTION] = "http://127.0.0.1:8787",
    token: Annotated[str | None, _TOKEN_OPTION] = None,
) -> None:
    """Print a conversation's whole transcript: roles, tool calls and results, times."""
    from runtimes.actor import InvalidActorId
    from runtimes.cli.history import HostUnavailable, format_entry, print_lines

    if not token:
        raise typer.BadParameter("--token (or PERDURE_TOKEN) is required")

    async def lines(client: ActorClient) -> AsyncIterator[str]:
        async for entry in client.entries(actor, conversation):
            yield format_entry(entry)

    try:
        print_lines(url, token, lines, typer.echo)
    except (HostUnavailable, InvalidActorId) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
