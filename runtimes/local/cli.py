"""The ``perdure`` command line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer

__all__ = ["app", "main"]

app = typer.Typer(help="perdure: a durable agent harness.", no_args_is_help=True)
demo_app = typer.Typer(help="Runnable demonstrations.", no_args_is_help=True)
app.add_typer(demo_app, name="demo")


def _mount_sandbox_commands() -> None:
    # The sandbox server's own CLI (``sandbox``, ``token``) under the perdure command.
    from remote_env.cli import app as sandbox_cli

    for command in sandbox_cli.registered_commands:
        app.registered_commands.append(command)


_mount_sandbox_commands()


@demo_app.command("counter")
def demo_counter(
    db: Path = typer.Option(Path("counter.sqlite"), help="SQLite file holding the count."),
    to: int = typer.Option(10, min=1, help="Count to this number (for a new count)."),
    interval_ms: int = typer.Option(500, min=0, help="Milliseconds between ticks."),
) -> None:
    """Count durably: kill it mid-count and run it again to see it carry on."""
    from runtimes.local.counter import run_counter

    result = asyncio.run(run_counter(db, to=to, interval_ms=interval_ms))
    typer.echo(f"done: {result}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
