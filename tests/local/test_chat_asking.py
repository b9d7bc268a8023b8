"""What ``perdure chat`` reads of a view to ask about approvals, and how it reads an
answer (runtimes/cli/asking.py)."""

from __future__ import annotations

from typing import Any

from core.times import iso_time
from runtimes.cli.asking import answer_of, questions


def _view(**slots: Any) -> Any:
    return {"docs": {"live": {"tools": slots}}}


def test_the_questions_are_the_slots_waiting_for_a_decision() -> None:
    view = _view(
        a={"name": "wire", "status": "approval", "task": 9, "approval": {"asked_at": 1}},
        b={"name": "bash", "status": "running", "task": 7},
        c={"name": "rm", "status": "approval", "task": 8, "approval": {"decision": "deny"}},
        d={"name": "pay", "status": "approval", "task": 5, "approval": {"expires_at": 60_000}},
    )
    asked = questions(view)
    assert [(q.task, q.tool) for q in asked] == [(5, "pay"), (9, "wire")]
    assert asked[1].text() == "? wire needs your approval: approve? [y/n/note]"
    assert "denied at" in asked[0].text() and iso_time(60_000)[:10] in asked[0].text()
    assert questions(None) == [] and questions(_view()) == []


def test_an_answer_is_y_n_or_a_note_that_denies() -> None:
    assert answer_of("y") == ("approve", None) and answer_of(" YES ") == ("approve", None)
    assert answer_of("n") == ("deny", None) and answer_of("No") == ("deny", None)
    assert answer_of("not on Sundays") == ("deny", "not on Sundays")
