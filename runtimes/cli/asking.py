"""Tool calls waiting for a person's decision, as ``perdure chat`` asks about them.

The conversation's ``live`` document shows a call pending approval as a tool slot with
``status: "approval"`` and the question (``approval``, without a ``decision`` until one
is recorded; core/harness/approvals.py). The chat asks ``approve? [y/n/note]`` for each,
one at a time, and posts the answer to ``POST /v1/actors/{a}/approvals/{task}``: ``y``
approves, ``n`` denies, any other text denies with that text as the note the model reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from core.jsonvalue import JsonObject
from core.times import iso_time
from runtimes.cli.transcript import as_object

__all__ = ["QUESTION", "Question", "answer_of", "questions"]

QUESTION = "approve? [y/n/note]"


class Question:
    """One call waiting for a decision: its tool task (the approval's id) and tool."""

    def __init__(self, task: int, tool: str, expires_at: int | None = None) -> None:
        self.task = task
        self.tool = tool
        self.expires_at = expires_at

    def text(self) -> str:
        """The question as the chat asks it (with the expiry in this terminal's zone)."""
        when = ""
        if self.expires_at is not None:
            zone = datetime.now().astimezone().tzinfo
            when = f" (denied at {iso_time(self.expires_at, zone)} if undecided)"
        return f"? {self.tool} needs your approval{when}: {QUESTION}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Question) and other.task == self.task

    def __hash__(self) -> int:
        return self.task


def questions(view: JsonObject | None) -> list[Question]:
    """The calls of the view waiting for a decision, in task order."""
    live = as_object(as_object(as_object(view).get("docs")).get("live"))
    out = []
    for slot in as_object(live.get("tools")).values():
        slot = as_object(slot)
        approval = as_object(slot.get("approval"))
        task = slot.get("task")
        if slot.get("status") == "approval" and "decision" not in approval and type(task) is int:
            expires = approval.get("expires_at")
            name = str(slot.get("name") or approval.get("tool") or "?")
            out.append(Question(task, name, expires if type(expires) is int else None))
    return sorted(out, key=lambda q: q.task)


def answer_of(text: str) -> tuple[Literal["approve", "deny"], str | None]:
    """``y``/``yes`` approve; ``n``/``no`` deny; anything else denies with it as the note."""
    word = text.strip()
    if word.lower() in ("y", "yes"):
        return "approve", None
    if word.lower() in ("n", "no"):
        return "deny", None
    return "deny", word
