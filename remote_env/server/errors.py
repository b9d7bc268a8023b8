"""The two ways an operation fails on the server.

* :class:`ToolFailure`: the operation ran and failed (missing file, ambiguous edit, ...). It is
  recorded in the op log and answered ``200`` with ``status: "failed"``.
* :class:`Rejected`: the request was refused before any side effect (bad token, path outside
  the workspace, op id reused for another request, ...). It is answered with a 4xx
  ``{"error": {"code", "message"}}`` and never recorded, so a fixed request may reuse the id.
"""

from __future__ import annotations

from remote_env.protocol import ErrorBody

__all__ = ["Rejected", "ToolFailure", "outside_workspace"]


class ToolFailure(Exception):
    """A recorded, tool-level failure with a wire ``code`` (see ``core.env`` for the list)."""

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path

    def body(self) -> ErrorBody:
        """The wire form."""
        return ErrorBody(code=self.code, message=self.message, path=self.path)


class Rejected(Exception):
    """A refusal before any side effect, answered with HTTP ``status``."""

    def __init__(self, status: int, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.path = path

    def body(self) -> ErrorBody:
        """The wire form."""
        return ErrorBody(code=self.code, message=self.message, path=self.path)


def outside_workspace(path: str) -> Rejected:
    """The refusal for a path that resolves outside the workspace."""
    return Rejected(403, "outside_workspace", f"path is outside the workspace: {path}", path=path)
