"""The local server tunes the collector while serving (runtimes/local/collector.py): it
freezes what start-up made, so that the full passes, which pause the loop that accepts
every submission, skip it, and collects the young and middle generations less often;
shutdown puts both back (a process may serve many times, as the tests do)."""

from __future__ import annotations

import gc
from pathlib import Path

from runtimes.local import ServingCollector
from runtimes.local.collector import GEN0_THRESHOLD, GEN1_THRESHOLD
from tests.local.support import host_config, serve_in_thread, wait_until


def _tracked(obj: object) -> bool:
    # Frozen objects are in no generation, so gc.get_objects() leaves them out.
    return any(o is obj for o in gc.get_objects())


def test_the_collector_is_tuned_while_serving_and_put_back_after(tmp_path: Path) -> None:
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    assert thresholds[0] < GEN0_THRESHOLD and thresholds[1] < GEN1_THRESHOLD
    with serve_in_thread(host_config(tmp_path / "data")) as running:
        app = running.server.config.app
        wait_until(lambda: gc.get_freeze_count() > 0)
        assert not _tracked(app)
        assert gc.get_threshold() == (GEN0_THRESHOLD, GEN1_THRESHOLD, thresholds[2])
        with running.client() as client:
            r = client.post("/v1/actors/alice/submissions", json={"type": "input", "content": "hi"})
            assert r.status_code == 202, r.text
    assert gc.get_freeze_count() == 0
    assert _tracked(app)
    assert gc.get_threshold() == thresholds


def test_an_embedding_tunes_the_collector_for_a_block_and_gets_it_back() -> None:
    thresholds = gc.get_threshold()
    made_before = object.__new__(_Tracked)
    collector = ServingCollector()
    with collector:
        assert collector.started and gc.get_freeze_count() > 0
        assert not _tracked(made_before)  # frozen: full passes skip it
        made_during = object.__new__(_Tracked)
        assert _tracked(made_during)
        assert gc.get_threshold() == (GEN0_THRESHOLD, GEN1_THRESHOLD, thresholds[2])
        collector.start()  # a second start changes nothing: one stop puts all back
    assert not collector.started
    assert gc.get_freeze_count() == 0 and _tracked(made_before)
    assert gc.get_threshold() == thresholds
    collector.stop()  # without a start: nothing to put back
    assert gc.get_threshold() == thresholds


class _Tracked:
    """An object the collector tracks (a plain class instance)."""
