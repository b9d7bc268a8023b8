"""A few cycles of the soak (``python -m tests.recovery.local.soak`` runs the real thing): the
host process SIGKILLed and restarted under load, nothing lost or duplicated."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.recovery.local.soak import run_soak


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_short_soak_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    result = run_soak(5, data=tmp_path / "data")
    print(result.summary())
    assert result.accepted > 0 and len(result.p99_after_ms) == 5
    assert result.mailed > 0  # the admission journal's path was under the kills too
    assert result.lost == 0 and result.duplicated == 0, result.summary()
    assert result.problems == [] and result.wrong_answers == 0, result.summary()
    assert result.answered + result.unanswered == result.accepted
