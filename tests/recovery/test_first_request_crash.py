"""A run's first model request cut off by a crash, its pin held in memory: the first
round is prepared without a commit of its own when the pin would write nothing but the
checkpoint (issue 36), so the stored phase is still ``prepare``. A fresh process
prepares again and sends the request once more: the request had no effect of its own,
and the input is answered once. The SIGKILLed version is the crash matrix's
``model.request`` point (``tests/recovery/crash_points.py``)."""

from __future__ import annotations

from pathlib import Path

from core.faux import faux_message
from core.harness.runs import GENERATION
from core.storage import TaskQuery
from tests.core.harness.support import entries, hung_in_first_request, kinds


async def test_a_crash_during_the_first_request_prepares_again_and_answers_once(
    tmp_path: Path,
) -> None:
    rig, h, sub_id = await hung_in_first_request(tmp_path)
    stored = (await h.session.storage.scan_tasks(TaskQuery(kind=GENERATION))).items
    assert [t.checkpoint for t in stored] == [{"phase": "prepare", "attempt": 1}]
    await rig.crash(h)

    rig.faux.respond(faux_message("the answer"))
    h = await rig.open()
    record = await (await h.submission(sub_id)).wait()  # type: ignore[union-attr]
    assert record.status == "done"
    items = await entries(h)
    assert kinds(items) == ["user", "assistant"] and record.answer == items[-1].id
    assert rig.faux.state.call_count == 2
    assert [m.role for m in rig.faux.state.requests[-1].messages] == ["user"]
    gens = (await h.session.storage.scan_tasks(TaskQuery(kind=GENERATION))).items
    assert [type(t.outcome).__name__ for t in gens] == ["Completed"]
    await h.close()
