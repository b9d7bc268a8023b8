"""Workspace names: one workspace per actor, named after it.

An actor's workspace on the sandbox is its actor id, so the sandbox accepts exactly the
actor ids every host accepts (``runtimes.actor.ids`` takes its rule from here): an id a
host admits must never be refused later by the sandbox, mid-tool. The alphabet has no
``.`` or ``/``: a name is always one plain directory under the server root, and the
server's own ``.perdure`` state stays out of reach. A leading ``-`` or ``_`` is harmless
there, because the server only ever uses a workspace as part of an absolute path.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["WORKSPACE_REGEX", "is_workspace_name"]

WORKSPACE_REGEX: Final = r"^[A-Za-z0-9_-]{1,64}$"
# fullmatch on the unanchored body: "$" alone would accept a trailing newline.
_WORKSPACE = re.compile(WORKSPACE_REGEX[1:-1])


def is_workspace_name(value: object) -> bool:
    """Whether ``value`` is a valid workspace (and so actor) name."""
    return isinstance(value, str) and _WORKSPACE.fullmatch(value) is not None
