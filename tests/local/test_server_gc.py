"""The local server freezes what start-up made (runtimes/local/server.py): the collector's
full passes, which pause the loop that accepts every submission, skip it while serving;
shutdown lets it go again (a process may serve many times, as the tests do)."""

from __future__ import annotations

import gc
from pathlib import Path

from tests.local.support import host_config, serve_in_thread, wait_until


def _tracked(obj: object) -> bool:
    # Frozen objects are in no generation, so gc.get_objects() leaves them out.
    return any(o is obj for o in gc.get_objects())


def test_start_up_objects_are_frozen_while_serving_and_released_after(tmp_path: Path) -> None:
    assert gc.get_freeze_count() == 0
    with serve_in_thread(host_config(tmp_path / "data")) as running:
        app = running.server.config.app
        wait_until(lambda: gc.get_freeze_count() > 0)
        assert not _tracked(app)
        with running.client() as client:
            r = client.post("/v1/actors/alice/submissions", json={"type": "input", "content": "hi"})
            assert r.status_code == 202, r.text
    assert gc.get_freeze_count() == 0
    assert _tracked(app)
