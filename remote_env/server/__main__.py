"""``python -m remote_env.server --root DIR --listen HOST:PORT [options]``."""

from __future__ import annotations

from remote_env.cli import sandbox_main

if __name__ == "__main__":
    sandbox_main()
